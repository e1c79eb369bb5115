package extauthz_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sync"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestCheckDecidesAsInline is the differential test of the stream workers and the admission
// (admit.go): every captured Check, and random and adversarial variants of them (paths,
// methods, bodies, arguments, MCP headers, credentials), sent over gRPC (so decided by a
// worker, several at once, through the admission), get the answer the same request gets
// decided directly, decision ids aside.
func TestCheckDecidesAsInline(t *testing.T) {
	h := start(t, harnessOpts{policies: map[string]string{"paths.rego": argPolicy}})
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	reqs := differentialChecks(t, rand.New(rand.NewPCG(seed, 21)), 400)
	got := make([]*authv3.CheckResponse, len(reqs))
	// At most 4 at once: the least the admission ever lets in at once (however slow a loaded
	// machine makes the Checks), so none is shed and every answer is a decision.
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, r := range reqs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resp, err := h.client.Check(context.Background(), r)
			if err != nil {
				t.Errorf("Check %d: %v", i, err)
			}
			got[i] = resp
		})
	}
	wg.Wait()
	allowedN := 0
	for i, r := range reqs {
		want := h.srv.CheckInline(context.Background(), r)
		if g, w := normalize(t, got[i]), normalize(t, want); g != w {
			t.Errorf("Check %d (%s %s %q): over gRPC\n%s\ndirectly\n%s", i, r.Attributes.Request.Http.Method,
				r.Attributes.Request.Http.Path, r.Attributes.Request.Http.RawBody, g, w)
		}
		if want.GetOkResponse() != nil {
			allowedN++
		}
	}
	if allowedN == 0 || allowedN == len(reqs) {
		t.Fatalf("%d of %d Checks allowed: the inputs do not reach both answers", allowedN, len(reqs))
	}
}

// differentialChecks are the captured Checks and n random variants of them.
func differentialChecks(t *testing.T, rnd *rand.Rand, n int) []*authv3.CheckRequest {
	names := []string{"agent_chat", "agent_mcp_path_only", "bad_body", "batch", "call_denied_bob", "call_jwt_metadata",
		"call_jwt_no_credential", "call_policy_error", "call_read_apikey", "call_write_stub", "duplicate_name", "gateway_route",
		"header_mismatch", "headers_only_list", "initialize", "list_spiffe_cert", "no_body_call", "no_identity", "notification",
		"other_agents_token", "spiffe_mismatch", "spiffe_two_ids", "sse_get", "trusted_header", "unknown_route", "untrusted_header"}
	var out []*authv3.CheckRequest
	for _, name := range names {
		out = append(out, load(t, name))
	}
	bodies := []string{
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search","arguments":{"query":"standup %d"}}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search","arguments":{"query":"/etc/passwd%d"}}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search","arguments":{"query":"/etc/x","query":"ok %d"}}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"write_note","arguments":{"text":"n%d"}}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search","arguments":{"boom":"x%d"}}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search","arguments":[%d]}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{"cursor":"%d"}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"resources/read","params":{"uri":"notes://%d"}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"prompts/get","params":{"name":"p%d"}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"sampling/x%d"}`,
		`{"jsonrpc":"2.0","id":%d,"result":{"n":%d}}`,
		`[{"jsonrpc":"2.0","id":%d,"method":"ping","n":%d}]`,
		`{"jsonrpc":"1.0","id":%d,"method":"ping","n":%d}`,
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search","arguments":{"query":"\ud800 %d"}}}`,
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search","arguments":{"query":"q%d"}}} trailing`,
	}
	paths := []string{"/agents/assistant/tools/notes/mcp", "/agents/assistant/mcp", "/agents/helper/mcp", "/agents/assistant/chat",
		"/gateway/agents/assistant/mcp", "/nowhere", "/agents/assistant/tools/notes/mcp?x=1"}
	keys := []string{"", "x-api-key", "authorization"}
	creds := []string{aliceKey, bobKey, botKey, "wrong-key-0123456789"}
	for i := range n {
		r := proto.Clone(out[rnd.IntN(len(out))]).(*authv3.CheckRequest)
		hr := r.GetAttributes().GetRequest().GetHttp()
		if hr == nil {
			continue
		}
		if hr.Headers == nil {
			hr.Headers = map[string]string{}
		}
		if rnd.IntN(3) > 0 {
			body := fmt.Sprintf(bodies[rnd.IntN(len(bodies))], i, i)
			if rnd.IntN(8) == 0 {
				body = body[:rnd.IntN(len(body)+1)]
			}
			hr.RawBody, hr.Body = []byte(body), ""
		}
		if rnd.IntN(4) == 0 {
			hr.Path = paths[rnd.IntN(len(paths))]
			r.Attributes.ContextExtensions = nil
		}
		if rnd.IntN(6) == 0 {
			hr.Method = []string{"GET", "POST", "DELETE", "PUT"}[rnd.IntN(4)]
		}
		if k := keys[rnd.IntN(len(keys))]; k != "" {
			delete(hr.Headers, "x-api-key")
			delete(hr.Headers, "authorization")
			v := creds[rnd.IntN(len(creds))]
			if k == "authorization" {
				v = "Bearer " + v
			}
			hr.Headers[k] = v
		}
		if rnd.IntN(8) == 0 {
			hr.Headers["mcp-method"] = []string{"tools/call", "tools/list", "ping"}[rnd.IntN(3)]
		}
		out = append(out, r)
	}
	return out
}

var uuid = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// normalize is resp as canonical JSON (sorted members, the body's JSON decoded) with decision
// ids replaced.
func normalize(t *testing.T, resp *authv3.CheckResponse) string {
	t.Helper()
	b, err := protojson.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if d, ok := v["deniedResponse"].(map[string]any); ok {
		var body any
		if s, ok := d["body"].(string); ok && json.Unmarshal([]byte(s), &body) == nil {
			d["body"] = body
		}
	}
	out, _ := json.Marshal(v)
	return uuid.ReplaceAllString(string(out), "ID")
}
