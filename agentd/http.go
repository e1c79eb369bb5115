package agentd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// maxChatBody bounds a chat request (the message and the history sent back).
const maxChatBody = 4 << 20

// Handler serves agentd's HTTP API:
//
//	POST /agents/{name}/chat         JSON request, JSON response
//	POST /agents/{name}/chat/stream  JSON request, Server-Sent Events response
//	     /agents/{name}/mcp          the agent as an MCP server (streamable HTTP)
//	GET  /agents/{name}/status       the agent's description, tools and recent invocations
//	GET  /agents                     the agents the caller may invoke
//
// Every route authenticates the caller first, through the process's one gate (a delegation
// token must be for the route's agent); invocations are decided (agent/invoke) before anything
// runs. /health and /metrics belong to the process that mounts this handler.
func (s *Server) Handler() http.Handler {
	gate := &policyhttp.Gate{Auth: s.opts.Auth, Failures: s.opts.AuthFailures}
	mux := http.NewServeMux()
	mux.Handle("POST /agents/{agent}/chat", gate.Authenticated(http.HandlerFunc(s.chat)))
	mux.Handle("POST /agents/{agent}/chat/stream", gate.Authenticated(http.HandlerFunc(s.chatStream)))
	mux.Handle("/agents/{agent}/mcp", gate.Authenticated(s.transport))
	mux.Handle("GET /agents/{agent}/status", gate.Authenticated(http.HandlerFunc(s.status)))
	mux.Handle("GET /agents", gate.Authenticated(http.HandlerFunc(s.list)))
	return mux
}

// ChatRequest is the body of the chat endpoints.
type ChatRequest struct {
	Message string          `json:"message"`
	History []model.Message `json:"history,omitempty"` // the history of the previous response, to continue a conversation
}

func (s *Server) readChat(w http.ResponseWriter, r *http.Request) (*ChatRequest, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxChatBody))
	if err != nil {
		policyhttp.WriteError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the request body is larger than %d bytes", maxChatBody))
		return nil, false
	}
	var req ChatRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", `the body must be JSON {"message": "...", "history": [...]}: `+err.Error())
		return nil, false
	}
	if strings.TrimSpace(req.Message) == "" {
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", "message: required: what the agent should do")
		return nil, false
	}
	for i, m := range req.History {
		if m.Role != model.RoleUser && m.Role != model.RoleModel {
			policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("history[%d].role: %q is not \"user\" or \"model\"", i, m.Role))
			return nil, false
		}
	}
	return &req, true
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	req, ok := s.readChat(w, r)
	if !ok {
		return
	}
	res, err := s.Invoke(r.Context(), Invocation{Agent: r.PathValue("agent"), Caller: identity.CallerFrom(r.Context()), Message: req.Message, History: req.History})
	if err != nil {
		writeInvokeError(w, err)
		return
	}
	policyhttp.WriteJSON(w, statusCode(res.Status), res)
}

// chatStream answers with Server-Sent Events: "text" events carry pieces of the answer as the
// model produces them, "tool_call"/"tool_result" events the tool calls, and a last "done" event
// the whole Result ("error" instead when nothing ran).
func (s *Server) chatStream(w http.ResponseWriter, r *http.Request) {
	req, ok := s.readChat(w, r)
	if !ok {
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var mu sync.Mutex
	send := func(event string, v any) {
		data, _ := json.Marshal(v)
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
		if flusher != nil {
			flusher.Flush()
		}
	}
	res, err := s.Invoke(r.Context(), Invocation{Agent: r.PathValue("agent"), Caller: identity.CallerFrom(r.Context()), Message: req.Message,
		History: req.History, OnEvent: func(e Event) { send(e.Type, e) }})
	if err != nil {
		code, kind := invokeErrorCode(err)
		body := map[string]any{"code": kind, "status": code, "message": err.Error()}
		if denied := (*DeniedError)(nil); errors.As(err, &denied) && denied.RetryAfter > 0 {
			body["retry_after_ms"] = enforce.RetryAfterMS(denied.RetryAfter)
		}
		send("error", map[string]any{"error": body})
		return
	}
	send("done", res)
}

// AgentInfo is an agent as /agents and /agents/{name}/status describe it.
type AgentInfo struct {
	Name        string                 `json:"name"`
	Model       string                 `json:"model"`
	Description string                 `json:"description"`
	Skills      []string               `json:"skills"`
	Tools       []manifest.AllowedTool `json:"tools"`
	Endpoints   map[string]string      `json:"endpoints"`
	Revision    string                 `json:"revision"`
	Stats       *agentStats            `json:"stats,omitempty"`
}

func info(a *manifest.Agent, rev string) AgentInfo {
	base := "/agents/" + a.Name
	return AgentInfo{Name: a.Name, Model: a.Model, Description: strings.TrimSpace(a.Description), Skills: a.Skills, Tools: a.Tools,
		Revision: rev, Endpoints: map[string]string{"chat": base + "/chat", "stream": base + "/chat/stream", "mcp": base + "/mcp",
			"tools": "/gateway" + base + "/mcp"}}
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	st := s.state.Load()
	if st == nil {
		policyhttp.WriteError(w, http.StatusServiceUnavailable, "no_build", ErrNoBuild.Error())
		return
	}
	name := r.PathValue("agent")
	a, ok := st.manifest.Agent(name)
	if !ok || !s.mayInvoke(r.Context(), name) {
		// An agent the caller may not invoke is not shown: its existence is not the caller's business.
		policyhttp.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no agent %q that you may invoke", name))
		return
	}
	in := info(a, st.hash)
	stats := s.statsOf(name)
	in.Stats = &stats
	policyhttp.WriteJSON(w, http.StatusOK, in)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	st := s.state.Load()
	if st == nil {
		policyhttp.WriteError(w, http.StatusServiceUnavailable, "no_build", ErrNoBuild.Error())
		return
	}
	out := []AgentInfo{}
	for i := range st.manifest.Agents {
		a := &st.manifest.Agents[i]
		if s.mayInvoke(r.Context(), a.Name) {
			out = append(out, info(a, st.hash))
		}
	}
	policyhttp.WriteJSON(w, http.StatusOK, map[string]any{"revision": st.hash, "project": st.manifest.Project, "agents": out})
}

// statusCode maps an invocation's status to the chat endpoint's HTTP status.
func statusCode(status string) int {
	switch status {
	case "ok":
		return http.StatusOK
	case "timeout":
		return http.StatusGatewayTimeout
	case "max_turns":
		return http.StatusUnprocessableEntity
	case "cancelled":
		return 499 // the client went away; nobody reads it
	}
	return http.StatusBadGateway // the model failed
}

func invokeErrorCode(err error) (int, string) {
	var denied *DeniedError
	var notFound *NotFoundError
	switch {
	case errors.As(err, &denied) && denied.RetryAfter > 0:
		return http.StatusTooManyRequests, "rate_limited"
	case errors.As(err, &denied):
		return http.StatusForbidden, "denied"
	case errors.As(err, &notFound):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, ErrNoBuild):
		return http.StatusServiceUnavailable, "no_build"
	}
	return http.StatusBadRequest, "bad_request"
}

func writeInvokeError(w http.ResponseWriter, err error) {
	code, kind := invokeErrorCode(err)
	body := map[string]any{"code": kind, "message": err.Error()}
	var denied *DeniedError
	if errors.As(err, &denied) {
		body["decision_id"] = denied.DecisionID
		body["reasons"] = denied.Reasons
		if denied.RetryAfter > 0 {
			body["retry_after_ms"] = enforce.RetryAfterMS(denied.RetryAfter)
			w.Header().Set("Retry-After", strconv.FormatInt(enforce.RetryAfterSeconds(denied.RetryAfter), 10))
		}
	}
	policyhttp.WriteJSON(w, code, map[string]any{"error": body})
}
