package extauthz

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/policies/stub"
)

// Headers Lush adds to requests and answers.
const (
	HeaderDecisionID = "x-lush-decision-id"
	HeaderOutcome    = "x-lush-outcome"     // on answers given at the sidecar: deny, error, stub, ...
	HeaderApprovalID = "x-lush-approval-id" // on a call refused while it waits for a person's approval
)

// allowed lets the request continue to the upstream with the decision id and set added, and
// remove taken away. v is nil for requests that another enforcement point decides.
func allowed(v *enforce.Verdict, set map[string]string, remove []string) *authv3.CheckResponse {
	ok := &authv3.OkHttpResponse{HeadersToRemove: remove}
	if v != nil {
		ok.Headers = append(ok.Headers, header(HeaderDecisionID, v.ID))
	}
	names := make([]string, 0, len(set))
	for k := range set {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		// HTTP/2 header names are lower case; Envoy compares them so.
		ok.Headers = append(ok.Headers, header(strings.ToLower(k), set[k]))
	}
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(code.Code_OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok}, DynamicMetadata: metadata(v)}
}

// denied answers a request the decision did not allow: 403 for the policy, 503 when the policy
// could not be evaluated (or the decision not recorded), with a JSON-RPC error that says so.
func denied(id json.RawMessage, v *enforce.Verdict) *authv3.CheckResponse {
	status, grpcCode, rpcCode := http.StatusForbidden, code.Code_PERMISSION_DENIED, codeDenied
	msg := v.Explain()
	if v.Outcome == authz.OutcomeApproval {
		// Tool calls ask for an approval (awaitingApproval); this is another action, or a sidecar
		// without an approvals store.
		msg = "This request needs a person's approval, and only tool calls can ask for one here, so it is refused (decision " + v.ID + ")."
	}
	if v.Outcome == authz.OutcomeError {
		status, grpcCode, rpcCode = http.StatusServiceUnavailable, code.Code_UNAVAILABLE, mcphttp.CodeInternalError
		what := "could not decide this call"
		if !v.Recorded {
			what = "could not record its decision on this call" // the policy may have decided; the log did not take it
		}
		msg = "Lush " + what + ", so it is denied: " + strings.TrimPrefix(v.Explain(), "Lush denied this call: ")
	}
	data := map[string]any{"decision_id": v.ID, "outcome": v.Outcome, "rules": v.Rules, "reasons": v.Reasons}
	if !v.Recorded {
		data["recorded"] = false // the id is not in the decision log (Explain says so)
	}
	if v.RetryAfter > 0 { // denied by a rate limit alone: 429 with the standard retry hint
		status, grpcCode = http.StatusTooManyRequests, code.Code_RESOURCE_EXHAUSTED
		data["retry_after_ms"] = enforce.RetryAfterMS(v.RetryAfter)
	}
	body := rpcError(id, rpcCode, msg, data)
	r := answer(status, grpcCode, body, v)
	r.GetDeniedResponse().Headers = append(r.GetDeniedResponse().Headers, header(HeaderDecisionID, v.ID))
	if v.RetryAfter > 0 {
		r.GetDeniedResponse().Headers = append(r.GetDeniedResponse().Headers,
			header("retry-after", strconv.FormatInt(enforce.RetryAfterSeconds(v.RetryAfter), 10)))
	}
	return r
}

// invalidArguments answers a tools/call whose arguments were refused before the policy
// (enforce.Enforcer.CheckArguments): 400, with a JSON-RPC invalid-params error that names the
// limit or the string at fault, and the recorded decision.
func invalidArguments(id json.RawMessage, v *enforce.Verdict, problem *jsonlimit.Error) *authv3.CheckResponse {
	msg := enforce.ExplainArguments(problem, v.ID)
	data := map[string]any{"decision_id": v.ID, "outcome": v.Outcome, "rules": v.Rules, "reasons": v.Reasons}
	r := answer(http.StatusBadRequest, code.Code_INVALID_ARGUMENT, rpcError(id, mcphttp.CodeInvalidParams, msg, data), v)
	r.GetDeniedResponse().Headers = append(r.GetDeniedResponse().Headers, header(HeaderDecisionID, v.ID))
	return r
}

// awaitingApproval answers a call that waits for approval ap: 403, with the approval's id and
// what to do in the JSON-RPC error the model reads.
func awaitingApproval(id json.RawMessage, v *enforce.Verdict, ap decisionlog.Approval) *authv3.CheckResponse {
	reasons := make([]string, 0, len(v.Approvals))
	for _, r := range v.Approvals {
		reasons = append(reasons, r.Message)
	}
	msg := fmt.Sprintf("This call needs a person's approval (%s). Approval %s is pending: once a holder of the approve role approves it "+
		"(lushctl approvals approve %s), repeat exactly the same call and it will run; it can be decided until %s (decision %s).",
		strings.Join(reasons, "; "), ap.ID, ap.ID, ap.Expires.Format(time.RFC3339), v.ID)
	data := map[string]any{"decision_id": v.ID, "outcome": v.Outcome, "rules": v.Rules, "approvals": v.Approvals,
		"approval": map[string]any{"id": ap.ID, "status": ap.Status, "expires": ap.Expires.Format(time.RFC3339)}}
	r := answer(http.StatusForbidden, code.Code_PERMISSION_DENIED, rpcError(id, codeDenied, msg, data), v)
	r.GetDeniedResponse().Headers = append(r.GetDeniedResponse().Headers, header(HeaderDecisionID, v.ID), header(HeaderApprovalID, ap.ID))
	return r
}

// approvalUnavailable answers a call that needs approval when the approvals store cannot be used:
// 503, fail closed.
func approvalUnavailable(id json.RawMessage, v *enforce.Verdict) *authv3.CheckResponse {
	msg := fmt.Sprintf("This call needs a person's approval, and the approvals store cannot be reached, so it is refused (decision %s).", v.ID)
	r := answer(http.StatusServiceUnavailable, code.Code_UNAVAILABLE, rpcError(id, mcphttp.CodeInternalError, msg,
		map[string]any{"decision_id": v.ID, "outcome": v.Outcome}), v)
	r.GetDeniedResponse().Headers = append(r.GetDeniedResponse().Headers, header(HeaderDecisionID, v.ID))
	return r
}

// stubbed answers a write that live writes do not cover, at the sidecar: a JSON-RPC success
// whose result marks the stub. The upstream never sees the call.
func stubbed(id json.RawMessage, v *enforce.Verdict, c stub.Call) *authv3.CheckResponse {
	if id == nil {
		id = json.RawMessage("null")
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": stub.Result(c)})
	r := answer(http.StatusOK, code.Code_PERMISSION_DENIED, body, v)
	r.GetDeniedResponse().Headers = append(r.GetDeniedResponse().Headers, header(HeaderDecisionID, v.ID))
	return r
}

// refuse answers a request that could not be decided (no identity, a message that cannot be
// read, an unknown route).
func refuse(id json.RawMessage, p *problem) *authv3.CheckResponse {
	grpcCode := code.Code_INVALID_ARGUMENT
	switch p.status {
	case http.StatusUnauthorized:
		grpcCode = code.Code_UNAUTHENTICATED
	case http.StatusForbidden:
		grpcCode = code.Code_PERMISSION_DENIED
	case http.StatusNotFound:
		grpcCode = code.Code_NOT_FOUND
	case http.StatusServiceUnavailable:
		grpcCode = code.Code_UNAVAILABLE
	case http.StatusInternalServerError:
		grpcCode = code.Code_INTERNAL
	}
	r := answer(p.status, grpcCode, rpcError(id, p.code, p.msg, nil), nil)
	if p.status == http.StatusUnauthorized {
		r.GetDeniedResponse().Headers = append(r.GetDeniedResponse().Headers, header("www-authenticate", `Bearer realm="lush"`))
	}
	return r
}

// answer is a response given at the sidecar instead of the upstream's.
func answer(status int, grpcCode code.Code, body []byte, v *enforce.Verdict) *authv3.CheckResponse {
	outcome := "refused"
	if v != nil {
		outcome = v.Outcome
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(grpcCode), Message: outcome},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: []*corev3.HeaderValueOption{header("content-type", "application/json"), header(HeaderOutcome, outcome)},
			Body:    string(body),
		}},
		DynamicMetadata: metadata(v),
	}
}

func rpcError(id json.RawMessage, rpcCode int, msg string, data map[string]any) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	e := map[string]any{"code": rpcCode, "message": msg}
	if data != nil {
		e["data"] = data
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": e})
	return b
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

// metadata is the decision as Envoy's dynamic metadata (namespace envoy.filters.http.ext_authz),
// for its access log: %DYNAMIC_METADATA(envoy.filters.http.ext_authz:decision_id)%. It is
// built directly, not through structpb.NewStruct's map of interfaces, with NewStruct's answer:
// none at all when a value is not valid UTF-8.
func metadata(v *enforce.Verdict) *structpb.Struct {
	if v == nil {
		return nil
	}
	rules := strings.Join(v.Rules, ",")
	for _, s := range [...]string{v.ID, v.Outcome, v.Access, v.Risk, v.Revision, rules, v.Tool} {
		if !utf8.ValidString(s) {
			return nil
		}
	}
	n := 7
	if v.Tool != "" {
		n++
	}
	f := make(map[string]*structpb.Value, n)
	f["decision_id"] = structpb.NewStringValue(v.ID)
	f["outcome"] = structpb.NewStringValue(v.Outcome)
	f["access"] = structpb.NewStringValue(v.Access)
	f["risk"] = structpb.NewStringValue(v.Risk)
	f["revision"] = structpb.NewStringValue(v.Revision)
	f["rules"] = structpb.NewStringValue(rules)
	f["point"] = structpb.NewStringValue(Point)
	if v.Tool != "" {
		f["tool"] = structpb.NewStringValue(v.Tool)
	}
	return &structpb.Struct{Fields: f}
}
