package audithttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/lush-agents/lush/audit/replay"
	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/internal/principal"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// The policy playground (console-b): POST /audit/eval evaluates one input with a build's policy
// and explains the decision as `lushctl policy eval` does. It is an evaluation, not a call:
// nothing is sent anywhere, nothing is charged, no approval is asked for. It is decided as
// audit/read, because what it tells is what the audit API tells already (the access review
// answers the same question for every subject, and a logged decision's input is readable by an
// auditor); the evaluated principal, agent, action and tool are in the read's arguments, so a
// project policy can refuse evaluations by them (input.arguments.route == "POST /audit/eval").

// Bounds of an evaluation request.
const (
	MaxEvalBody  = 64 << 10 // bytes of the request body
	maxTraceSize = 1 << 20  // bytes of an explain trace in the answer; cut with a marker beyond
)

// EvalRequest is the body of POST /audit/eval: an input, or the id of a logged decision whose
// (masked) input to evaluate again, and the build (default: the one this process serves).
type EvalRequest struct {
	Build      string       `json:"build,omitempty"`
	DecisionID string       `json:"decision_id,omitempty"`
	Input      *authz.Input `json:"input,omitempty"`
	// Explain adds OPA's evaluation trace: "full", or "notes" (only trace(...) notes).
	Explain string `json:"explain,omitempty"`
}

// EvalResult is the answer of POST /audit/eval.
type EvalResult struct {
	Build    string         `json:"build"`
	Input    authz.Input    `json:"input"`
	Decision authz.Decision `json:"decision"`
	// Explanation is the decision as `lushctl policy eval` prints it.
	Explanation string `json:"explanation"`
	Trace       string `json:"trace,omitempty"`
}

func (s *Server) eval(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxEvalBody))
	var req EvalRequest
	var bodyErr *requestError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		bodyErr = &requestError{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is larger than %d bytes: send a smaller input", MaxEvalBody)}
	case err != nil:
		bodyErr = &requestError{http.StatusBadRequest, "bad_request", "the body cannot be read: " + err.Error()}
	default:
		bodyErr = decodeEval(body, &req)
	}
	// Every request is a logged decision, a malformed one too (with what could be read of it).
	args := map[string]any{"route": "POST /audit/eval", "build": clip(req.Build), "decision_id": clip(req.DecisionID)}
	if in := req.Input; in != nil {
		args["principal"], args["groups"], args["agent"], args["action"] = clip(in.Principal.ID), in.Principal.Groups, clip(in.Agent), clip(in.Action)
		if in.Tool != nil {
			args["tool"], args["tool_name"] = clip(in.Tool.Ref), clip(in.Tool.Name)
		}
	}
	v := s.authorize(w, r, args)
	if v == nil {
		return
	}
	start := time.Now()
	if bodyErr != nil {
		s.answer(w, v, start, bodyErr)
		return
	}
	res, err := s.evaluate(r, &req)
	if err != nil {
		s.answer(w, v, start, err)
		return
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	policyhttp.WriteJSON(w, http.StatusOK, res)
}

// decodeEval reads the body (bounded by jsonlimit: depth, values, text) into req and checks it.
func decodeEval(body []byte, req *EvalRequest) *requestError {
	if err := (jsonlimit.Limits{MaxBytes: MaxEvalBody}).Check(body); err != nil {
		return &requestError{http.StatusBadRequest, "bad_request", "the body " + err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(req); err != nil {
		return &requestError{http.StatusBadRequest, "bad_request", "the body is not an evaluation request: " + err.Error() +
			" (send {\"input\": {…}} or {\"decision_id\": \"…\"}, with build and explain optional; docs/audit-api.md)"}
	}
	switch {
	case req.Input == nil && req.DecisionID == "":
		return &requestError{http.StatusBadRequest, "bad_request", "field input: required (or give decision_id to evaluate a logged decision's input)"}
	case req.Input != nil && req.DecisionID != "":
		return &requestError{http.StatusBadRequest, "bad_request", "field decision_id: give input or decision_id, not both"}
	case req.Explain != "" && req.Explain != "full" && req.Explain != "notes":
		return &requestError{http.StatusBadRequest, "bad_request", fmt.Sprintf("field explain: %q is not full or notes (or leave it out)", req.Explain)}
	case len(req.DecisionID) > maxParamLen:
		return &requestError{http.StatusBadRequest, "bad_request", "field decision_id: too long (use the id as the log shows it)"}
	}
	if req.Input != nil {
		return completeInput(req.Input)
	}
	return nil
}

// completeInput checks an input typed in the playground and fills in what `lushctl policy eval`
// fills in: the action (tools/call; agent/invoke for an agent without a tool; loop/trigger for a
// loop), no groups, the chain (the agent) and the depth (the chain's length).
func completeInput(in *authz.Input) *requestError {
	bad := func(field, format string, a ...any) *requestError {
		return &requestError{http.StatusBadRequest, "bad_request", "field input." + field + ": " + fmt.Sprintf(format, a...)}
	}
	if in.Principal.ID == "" {
		return bad("principal.id", "required, e.g. user:alice")
	}
	if _, err := principal.Parse(in.Principal.ID); err != nil {
		return bad("principal.id", "%v", err)
	}
	if in.Principal.Groups == nil {
		in.Principal.Groups = []string{}
	}
	for i, g := range in.Principal.Groups {
		if _, err := principal.Parse(g); err != nil {
			return bad(fmt.Sprintf("principal.groups[%d]", i), "%v", err)
		}
	}
	if in.Action == "" {
		switch {
		case in.Loop != "":
			in.Action = authz.ActionLoopTrigger
		case in.Tool == nil && in.Agent != "":
			in.Action = authz.ActionAgentInvoke
		default:
			in.Action = authz.ActionToolsCall
		}
	}
	if !slices.Contains(authz.Actions, in.Action) {
		return bad("action", "%q is not one of %s", in.Action, strings.Join(authz.Actions, ", "))
	}
	if in.Tool != nil && in.Tool.Ref == "" {
		return bad("tool.ref", "required with a tool, e.g. mcp://notes.example.com/mcp")
	}
	if in.Arguments != nil {
		if _, ok := in.Arguments.(map[string]any); !ok {
			return bad("arguments", "must be a JSON object")
		}
	}
	if len(in.Chain) == 0 && in.Agent != "" {
		in.Chain = []string{in.Agent}
	}
	if in.Depth == 0 {
		in.Depth = len(in.Chain)
	}
	return nil
}

func (s *Server) evaluate(r *http.Request, req *EvalRequest) (*EvalResult, error) {
	eng := s.cfg.Decider.Policy().Engine()
	if req.Build != "" {
		hash, err := s.resolve("build", req.Build)
		if err != nil {
			return nil, err
		}
		a, err := s.analysis(r.Context(), hash)
		if err != nil {
			return nil, err
		}
		eng = a.eng
	} else if eng == nil {
		return nil, &requestError{http.StatusBadRequest, "bad_request", "field build: required, this server serves no build yet (GET /audit/builds lists the kept ones)"}
	}
	var in authz.Input
	if req.Input != nil {
		in = *req.Input
	} else {
		rec, err := s.find(r.Context(), req.DecisionID)
		if err != nil {
			return nil, err
		}
		if rec == nil {
			return nil, &requestError{http.StatusNotFound, "not_found", fmt.Sprintf("field decision_id: no decision %q in the log", req.DecisionID)}
		}
		var ok bool
		if in, ok = replay.Input(rec.Event); !ok {
			return nil, &requestError{http.StatusBadRequest, "bad_request", "field decision_id: the log did not keep that decision's input (the policy masked it): fill in the call instead"}
		}
	}
	res := &EvalResult{Build: eng.Revision(), Input: in}
	if req.Explain != "" {
		var trace string
		res.Decision, trace = eng.Explain(r.Context(), in)
		res.Trace = authz.FilterTrace(trace, req.Explain)
		if len(res.Trace) > maxTraceSize {
			res.Trace = res.Trace[:maxTraceSize] + "\n… (the trace is cut here: it is longer than 1 MiB)\n"
		}
	} else {
		res.Decision = eng.Decide(r.Context(), in)
	}
	var b strings.Builder
	authz.WriteExplanation(&b, in, res.Decision)
	res.Explanation = b.String()
	return res, nil
}
