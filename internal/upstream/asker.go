package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// Asker answers a request an upstream server sends to the client during a call.
type Asker func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)

type askerKey struct{}

// WithAsker returns a context whose calls (Server.Request) have the requests their upstream sends
// about them (sampling/createMessage, elicitation/create, roots/list) answered by a.
func WithAsker(ctx context.Context, a Asker) context.Context {
	return context.WithValue(ctx, askerKey{}, a)
}

func askerFrom(ctx context.Context) Asker {
	a, _ := ctx.Value(askerKey{}).(Asker)
	return a
}

// Bounds on what an upstream can make Lush hold while it asks the client.
const (
	maxAsking      = 32      // server requests being answered at once, per connection
	maxAskedParams = 4 << 20 // bytes of one server request's params
)

// call is one request Lush sends upstream, as the server requests about it see it: whom to ask,
// and the context of the call (its values, identity and decision included, and its end).
type call struct {
	ctx    context.Context
	asker  Asker
	notify Notify
}

type callKey struct{}

// streamOf marks ctx as the context of a request Lush sends on c: a server request that arrives
// on that request's stream (streamable HTTP hands it this context) belongs to cl. cl is nil for
// Lush's own requests (lists, health checks), which have no one to ask.
func streamOf(ctx context.Context, cl *call) context.Context {
	return context.WithValue(ctx, callKey{}, cl)
}

// calls is the set of calls in flight on one connection.
type calls struct {
	mu  sync.Mutex
	set map[*call]struct{}
}

func (cs *calls) add(cl *call) func() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.set == nil {
		cs.set = map[*call]struct{}{}
	}
	cs.set[cl] = struct{}{}
	return func() {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		delete(cs.set, cl)
	}
}

// only returns the call in flight when there is exactly one.
func (cs *calls) only() (cl *call, inFlight int) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.set) != 1 {
		return nil, len(cs.set)
	}
	for cl := range cs.set {
		return cl, 1
	}
	return nil, 0
}

// JSON-RPC codes of the answers Lush gives an upstream's requests itself.
const (
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
	codeInternal       = -32603
)

// serverRequests answers the requests the server on connection c sends to Lush: ping at once;
// anything else by the Asker of the call it belongs to. A request on a call's own stream
// (streamable HTTP) belongs to that call; one that says nothing about its call (the standalone
// GET stream, stdio, legacy SSE) belongs to the only call in flight, and is refused when there
// are several (it must never reach another caller's client).
func (s *Server) serverRequests(c *conn) transport.RequestHandler {
	return func(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
		c.heard.Add(1)
		if req.Method == string(mcp.MethodPing) {
			return transport.NewJSONRPCResultResponse(req.ID, json.RawMessage(`{}`)), nil
		}
		level := slog.LevelWarn
		refuse := func(code int, format string, args ...any) (*transport.JSONRPCResponse, error) {
			msg := fmt.Sprintf(format, args...)
			s.opts.Logger.Log(ctx, level, "refused a request from an MCP server", "ref", s.tool.Ref, "method", req.Method, "reason", msg)
			return transport.NewJSONRPCErrorResponse(req.ID, code, msg, nil), nil
		}
		cl, onStream := ctx.Value(callKey{}).(*call)
		if !onStream {
			var inFlight int
			if cl, inFlight = c.calls.only(); cl == nil && inFlight == 0 {
				// Servers ask as soon as they are connected (roots/list after initialize): there
				// is no caller to ask, and the refusal is the answer they expect then.
				level = slog.LevelDebug
				return refuse(codeInternal, "%s: no call is in flight, so there is no client to ask", req.Method)
			} else if cl == nil {
				return refuse(codeInternal, "%s: Lush cannot tell which call this request belongs to (%d are in flight; send it on the call's own stream)", req.Method, inFlight)
			}
		}
		if cl == nil || cl.asker == nil {
			return refuse(codeMethodNotFound, "%s: the client of this call cannot be asked (method not available)", req.Method)
		}
		var params json.RawMessage
		if req.Params != nil {
			var err error
			if params, err = json.Marshal(req.Params); err != nil {
				return refuse(codeInvalidParams, "%s: params: %v", req.Method, err)
			}
		}
		if len(params) > maxAskedParams {
			return refuse(codeInvalidParams, "%s: params: larger than %d bytes", req.Method, maxAskedParams)
		}
		select {
		case c.asking <- struct{}{}:
		default:
			return refuse(codeInternal, "%s: too many requests from this server are waiting for their clients (at most %d)", req.Method, maxAsking)
		}
		if c.answer != nil {
			// Answered apart, bounded only by the call: the transport would give the answer
			// 30 seconds, too few for a person to fill in a form.
			go func() {
				defer func() { <-c.asking }()
				c.answer(cl.ctx, s.ask(cl.ctx, cl, req, params))
			}()
			return nil, nil
		}
		defer func() { <-c.asking }()
		// The Asker also stops when the transport gives up on this request, and sees when that is.
		askCtx, cancel := context.WithCancel(cl.ctx)
		if d, ok := ctx.Deadline(); ok {
			askCtx, cancel = context.WithDeadline(cl.ctx, d)
		}
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		return s.ask(askCtx, cl, req, params), nil
	}
}

// ask has the Asker of call cl answer req within ctx (which carries the call's values, and ends
// with it), and returns the answer for the server: its result, or its error as a JSON-RPC error
// (an *RPCError keeps its code).
func (s *Server) ask(ctx context.Context, cl *call, req transport.JSONRPCRequest, params json.RawMessage) *transport.JSONRPCResponse {
	res, err := cl.asker(ctx, req.Method, params)
	if err != nil {
		var rpc *RPCError
		if errors.As(err, &rpc) {
			var data any
			if len(rpc.Data) > 0 {
				data = rpc.Data
			}
			return transport.NewJSONRPCErrorResponse(req.ID, rpc.Code, rpc.Message, data)
		}
		return transport.NewJSONRPCErrorResponse(req.ID, codeInternal, req.Method+": "+err.Error(), nil)
	}
	if len(res) == 0 {
		res = json.RawMessage(`{}`)
	}
	return transport.NewJSONRPCResultResponse(req.ID, res)
}

// postAnswer returns how the answer to a request of a streamable HTTP server is sent on its own:
// POSTed to the server's URL on the connection's session, as mcp-go's transport does.
func postAnswer(url string, headers map[string]string, session func() string, version string) func(context.Context, *transport.JSONRPCResponse) {
	client := &http.Client{Transport: httpTransport}
	return func(ctx context.Context, resp *transport.JSONRPCResponse) {
		body, err := json.Marshal(resp)
		if err != nil {
			return
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if id := session(); id != "" {
			req.Header.Set(mcp.HeaderSessionID, id)
		}
		req.Header.Set(mcp.HeaderProtocolVersion, version)
		if res, err := client.Do(req); err == nil {
			io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
			res.Body.Close()
		}
	}
}
