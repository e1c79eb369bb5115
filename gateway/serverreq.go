package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
)

// Server requests: the requests an upstream sends to the client during a call
// (sampling/createMessage, elicitation/create, roots/list), as requests of their own (before
// 2026-07-28) or as the inputRequests of an input_required result (2026-07-28). Each is decided
// as an action of its own, with the call's principal, agent, chain and tool and the call's
// decision (input.call), and logged with the call's decision as its parent, before it reaches
// the client; one the client did not declare the capability for never does. How it reaches the
// client depends on the client's version: a request on the call's stream (Ask) for a client
// before 2026-07-28, an input_required result for a 2026-07-28 client (exchange.go bridges an
// upstream that asks the old way).

// JSON-RPC codes of the answers the gateway gives an upstream's request itself.
const (
	codeServerRequestDenied = -32600 // the policy denied it
	codeClientCannot        = -32601 // the client did not declare it, or cannot be asked
	codeServerRequestFailed = -32603 // asking the client failed (timeout, the call ended)
)

// maxInputRounds bounds the input_required rounds of one call the gateway answers itself (an
// upstream of 2026-07-28 in front of an older client).
const maxInputRounds = 8

// serverCall is a call its upstream may send requests about: what they are decided with.
type serverCall struct {
	c      *call
	ref    string // the server
	name   string // the tool or prompt called, as the upstream knows it
	action string // the call's action: tools/call, prompts/get
	id     string // the call's decision
}

// isServerRequest reports whether method is a request an upstream may send to the client.
func isServerRequest(method string) bool { return slices.Contains(authz.ServerRequestActions, method) }

// decide decides one request of the upstream and records it, linked to the call's decision. It
// returns the allowed verdict, or the error the upstream is answered with (the denial is logged).
func (sc *serverCall) decide(ctx context.Context, method string, params json.RawMessage) (*enforce.Verdict, error) {
	if !isServerRequest(method) {
		return nil, &upstream.RPCError{Code: codeClientCannot, Message: fmt.Sprintf("%s: the gateway forwards only sampling/createMessage, elicitation/create and roots/list to clients", method)}
	}
	in := sc.c.input(method, &authz.Tool{Ref: sc.ref, Name: sc.name})
	in.Call = &authz.CallRef{DecisionID: sc.id, Action: sc.action, Outcome: authz.OutcomeAllow}
	in.Arguments = requestSummary(method, params)
	v := sc.c.g.enforcer.Decide(ctx, in, enforce.WithParent(sc.id))
	if !v.Allow || v.Outcome != authz.OutcomeAllow {
		return nil, &upstream.RPCError{Code: codeServerRequestDenied, Message: fmt.Sprintf("%s denied by policy: %s", method, v.Explain())}
	}
	if err := clientDeclares(sc.c.req.Capabilities(), method, params); err != nil {
		v.Complete(decisionlog.StatusError, 0, nil, err.Error())
		return nil, &upstream.RPCError{Code: codeClientCannot, Message: err.Error()}
	}
	return v, nil
}

// requestSummary is what the policy sees of a server request's params (input.arguments): the
// elicitation's mode and, in URL mode, its URL; the sampling request's maxTokens. Never the
// messages or the schema: a policy decides on the kind of request, and the log keeps little.
func requestSummary(method string, params json.RawMessage) any {
	var p struct {
		Mode      string `json:"mode"`
		URL       string `json:"url"`
		MaxTokens *int64 `json:"maxTokens"`
	}
	json.Unmarshal(params, &p)
	switch method {
	case authz.ActionElicitationCreate:
		s := map[string]any{"mode": elicitationMode(p.Mode)}
		if p.Mode == "url" {
			s["url"] = bounded(p.URL, 2048)
		}
		return s
	case authz.ActionSamplingCreate:
		if p.MaxTokens != nil {
			return map[string]any{"maxTokens": float64(*p.MaxTokens)}
		}
	}
	return nil
}

func elicitationMode(mode string) string {
	if mode == "" {
		return "form"
	}
	return mode
}

// clientDeclares checks that the client's capabilities (a JSON object) declare what a request
// needs: sampling, roots, or elicitation in the request's mode (an elicitation capability
// without modes is form mode, as before 2025-11-25).
func clientDeclares(caps json.RawMessage, method string, params json.RawMessage) error {
	var c map[string]json.RawMessage
	json.Unmarshal(caps, &c)
	has := func(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '{' }
	switch method {
	case authz.ActionSamplingCreate:
		if has(c["sampling"]) {
			return nil
		}
		return errors.New("sampling/createMessage: the client did not declare the sampling capability")
	case authz.ActionRootsList:
		if has(c["roots"]) {
			return nil
		}
		return errors.New("roots/list: the client did not declare the roots capability")
	case authz.ActionElicitationCreate:
		var p struct {
			Mode string `json:"mode"`
		}
		json.Unmarshal(params, &p)
		mode := elicitationMode(p.Mode)
		var modes map[string]json.RawMessage
		if has(c["elicitation"]) {
			json.Unmarshal(c["elicitation"], &modes)
			if has(modes[mode]) || (mode == "form" && len(modes) == 0) {
				return nil
			}
		}
		return fmt.Errorf("elicitation/create: the client did not declare elicitation in %s mode", mode)
	}
	return fmt.Errorf("%s is not a request the gateway forwards", method)
}

// complete records how a server request that was allowed ended; its answer is not kept.
func complete(v *enforce.Verdict, err error, latency time.Duration) {
	status, _ := outcome(err) // the client's JSON-RPC error, or one the gateway cannot ask: error
	errText := ""
	if err != nil {
		errText = err.Error()
	}
	v.Complete(status, latency, nil, errText)
}

// asker answers the requests the upstream sends during the call by asking the client on the
// call's stream (a client before 2026-07-28): decided, then asked, then logged as ended.
func (sc *serverCall) asker() upstream.Asker {
	return func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
		v, err := sc.decide(ctx, method, params)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		res, err := sc.c.req.Ask(ctx, method, params)
		complete(v, err, time.Since(start))
		return res, askError(method, err)
	}
}

// askError is the error the upstream is answered with when asking the client failed.
func askError(method string, err error) error {
	var rpc *mcphttp.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &rpc):
		var data json.RawMessage
		if rpc.Data != nil {
			data, _ = json.Marshal(rpc.Data)
		}
		return &upstream.RPCError{Code: rpc.Code, Message: rpc.Message, Data: data}
	case errors.Is(err, mcphttp.ErrCannotAsk):
		return &upstream.RPCError{Code: codeClientCannot, Message: method + ": the client cannot be asked on this request (it accepts no stream, or the call ended)"}
	}
	return &upstream.RPCError{Code: codeServerRequestFailed, Message: method + ": " + err.Error()}
}

// inputRequired is the part of a 2026-07-28 result that asks the client for input.
type inputRequired struct {
	ResultType    string                     `json:"resultType"`
	InputRequests map[string]json.RawMessage `json:"inputRequests,omitempty"`
	RequestState  string                     `json:"requestState,omitempty"`
}

// inputRequest is one request of an input_required result.
type inputRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// needsInput decodes result when it is an input_required result.
func needsInput(result json.RawMessage) (*inputRequired, bool) {
	if !bytes.Contains(result, []byte(`"input_required"`)) {
		return nil, false // the usual case: nothing to decode
	}
	var r inputRequired
	if json.Unmarshal(result, &r) != nil || r.ResultType != "input_required" {
		return nil, false
	}
	return &r, true
}

// maxInputRequests bounds the inputRequests of one result the gateway handles.
const maxInputRequests = 16

// decideInputs decides each input request of an upstream's input_required result (for a 2026-07-28
// client, before the result reaches it) and returns the result to pass on. A request the policy
// denies fails the call (the error says which). A request the client did not declare is left out
// (the server asked for it because the gateway declares every capability it can forward; a
// 2026-07-28 server must not ask a client for what it did not declare), and logged as such; when
// nothing is left to ask, the call fails.
func (sc *serverCall) decideInputs(ctx context.Context, result json.RawMessage, r *inputRequired) (json.RawMessage, error) {
	if len(r.InputRequests) > maxInputRequests {
		return nil, fmt.Errorf("the server asks for %d inputs at once, more than the %d the gateway passes on", len(r.InputRequests), maxInputRequests)
	}
	var undeclared error
	for _, key := range slices.Sorted(maps.Keys(r.InputRequests)) {
		var q inputRequest
		if json.Unmarshal(r.InputRequests[key], &q) != nil {
			return nil, fmt.Errorf("input request %q is not a request object", key)
		}
		v, err := sc.decide(ctx, q.Method, q.Params)
		var rpc *upstream.RPCError
		switch {
		case errors.As(err, &rpc) && rpc.Code == codeClientCannot && isServerRequest(q.Method):
			delete(r.InputRequests, key)
			undeclared = err
		case err != nil:
			return nil, err
		default:
			v.Complete(decisionlog.StatusOK, 0, nil, "") // passed on to the client
		}
	}
	if undeclared == nil {
		return result, nil
	}
	if len(r.InputRequests) == 0 {
		return nil, undeclared
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(result, &obj); err != nil {
		return nil, fmt.Errorf("the server's input_required result: %w", err)
	}
	obj["inputRequests"], _ = json.Marshal(r.InputRequests)
	return json.Marshal(obj)
}

// fulfil answers an upstream's input_required result by asking the client (before 2026-07-28),
// each request decided first; it returns the inputResponses to send again with.
func (sc *serverCall) fulfil(ctx context.Context, r *inputRequired) (map[string]json.RawMessage, error) {
	if len(r.InputRequests) > maxInputRequests {
		return nil, fmt.Errorf("the server asks for %d inputs at once, more than the %d the gateway handles", len(r.InputRequests), maxInputRequests)
	}
	ask := sc.asker()
	out := make(map[string]json.RawMessage, len(r.InputRequests))
	for _, key := range slices.Sorted(maps.Keys(r.InputRequests)) {
		var q inputRequest
		if json.Unmarshal(r.InputRequests[key], &q) != nil {
			return nil, fmt.Errorf("input request %q is not a request object", key)
		}
		res, err := ask(ctx, q.Method, q.Params)
		if err != nil {
			return nil, err
		}
		out[key] = res
	}
	return out, nil
}

// withInput is params with inputResponses and requestState set (a retry of a call).
func withInput(params json.RawMessage, responses map[string]json.RawMessage, state string) (json.RawMessage, error) {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	if p == nil {
		p = map[string]json.RawMessage{}
	}
	delete(p, "inputResponses")
	delete(p, "requestState")
	if len(responses) > 0 {
		p["inputResponses"], _ = json.Marshal(responses)
	}
	if state != "" {
		p["requestState"], _ = json.Marshal(state)
	}
	return json.Marshal(p)
}

// request sends a call upstream with the server requests it brings answered as the client's
// version allows, and returns the final result:
//   - a client before 2026-07-28: the upstream's requests are asked on the call's stream, and
//     the input_required results of a 2026-07-28 upstream are answered by asking the client and
//     sending the call again (at most maxInputRounds times);
//   - a 2026-07-28 client: an input_required result passes through once each of its requests is
//     decided; an upstream that asks the old way is bridged by an exchange (exchange.go).
func (sc *serverCall) request(ctx context.Context, srv *upstream.Server, method string, params json.RawMessage, token string, notify upstream.Notify) (json.RawMessage, error) {
	if sc.c.req.Stateless() {
		return sc.c.g.exchanges.run(ctx, sc, srv, method, params, token, notify)
	}
	ctx = upstream.WithAsker(ctx, sc.asker())
	for round := 0; ; round++ {
		res, err := srv.Request(ctx, method, params, token, notify)
		if err != nil {
			return nil, err
		}
		r, ok := needsInput(res)
		if !ok {
			return res, nil
		}
		if round >= maxInputRounds {
			return nil, fmt.Errorf("the server asked for input %d times: the gateway gives up", round+1)
		}
		responses, err := sc.fulfil(ctx, r)
		if err != nil {
			return nil, err
		}
		if params, err = withInput(params, responses, r.RequestState); err != nil {
			return nil, err
		}
	}
}
