package extauthz_test

import (
	"context"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/lush-agents/lush/policies/decisionlog"
)

// FuzzCheck sends requests with arbitrary paths, methods, bodies and MCP headers. Whatever they
// hold, Check answers (never an RPC error), and a request goes on to an upstream only when a
// logged decision allowed it (or the route is the gateway's, which decides for itself).
func FuzzCheck(f *testing.F) {
	h := start(f, harnessOpts{})
	for _, name := range []string{"call_read_apikey", "call_write_stub", "duplicate_name", "batch", "initialize", "notification", "agent_chat"} {
		r := load(f, name).GetAttributes().GetRequest().GetHttp()
		body := r.GetRawBody()
		if len(body) == 0 {
			body = []byte(r.GetBody())
		}
		f.Add(r.GetPath(), r.GetMethod(), body, r.GetHeaders()["mcp-method"], r.GetHeaders()["mcp-name"], true)
	}
	f.Add("/agents/assistant/tools/notes/mcp?x=1", "POST", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":[]}}`), "", "", true)
	f.Add("/agents/assistant/tools/notes/mcp", "POST", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{}}} {}`), "", "", true)
	f.Add("/gateway/agents/assistant/mcp", "POST", []byte(`{}`), "", "", false)
	f.Add("/agents/helper/../assistant/tools/notes/mcp", "POST", []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`), "ping", "", true)
	f.Fuzz(func(t *testing.T, path, method string, body []byte, mcpMethod, mcpName string, key bool) {
		req := load(t, "call_read_apikey")
		req.Attributes.ContextExtensions = nil
		hr := req.Attributes.Request.Http
		hr.Path, hr.Method, hr.RawBody = path, method, body
		hr.Headers = map[string]string{"mcp-method": mcpMethod, "mcp-name": mcpName}
		if key {
			hr.Headers["authorization"] = "Bearer " + aliceKey
		}
		ctx := context.Background()
		resp, err := h.srv.Check(ctx, req)
		if err != nil {
			t.Fatalf("Check returned an error: %v", err)
		}
		ok := resp.GetOkResponse()
		if ok == nil {
			if resp.GetDeniedResponse() == nil || resp.GetStatus().GetCode() == 0 {
				t.Fatalf("neither allowed nor denied: %v", resp)
			}
			return
		}
		id := ""
		for _, hv := range ok.GetHeaders() {
			if hv.GetHeader().GetKey() == "x-lush-decision-id" {
				id = hv.GetHeader().GetValue()
			}
		}
		if id == "" {
			if !gatewayRoute(req) {
				t.Fatalf("allowed without a decision: %s %q", method, path)
			}
			return
		}
		h.log.Sync(ctx)
		recs, err := h.reader(t).Query(ctx, decisionlog.Filter{DecisionID: id})
		if err != nil || len(recs) != 1 || recs[0].Event.Outcome != "allow" {
			t.Fatalf("allowed, but decision %s is not a logged allow: %v %v", id, recs, err)
		}
	})
}

func gatewayRoute(req *authv3.CheckRequest) bool {
	p := req.GetAttributes().GetRequest().GetHttp().GetPath()
	return len(p) >= len("/gateway/agents/") && p[:len("/gateway/agents/")] == "/gateway/agents/"
}

func (h *harness) reader(t testing.TB) *decisionlog.Reader {
	t.Helper()
	r, err := decisionlog.OpenReader(h.logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
