package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// skillServer is an MCP server (2025-11-25, JSON answers) declaring the skills extension with
// directoryRead: one skill, skill://demo/SKILL.md, listed as a resource too. It records the skills
// operations it receives ("<method> <uri>").
type skillServer struct {
	mu  sync.Mutex
	ops []string
}

const demoSkill = "skill://demo/SKILL.md"

func (s *skillServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			URI string `json:"uri"`
		} `json:"params"`
	}
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&m) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if m.ID == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	entry := map[string]any{"uri": demoSkill, "frontmatter": map[string]any{"name": "demo", "description": "A demo."},
		"resources": []any{map[string]any{"uri": demoSkill, "digest": "sha256:00", "size": 1}}}
	var result any
	var rpcErr map[string]any
	switch m.Method {
	case "initialize":
		result = map[string]any{"protocolVersion": "2025-11-25", "serverInfo": map[string]any{"name": "skills", "version": "1"},
			"capabilities": map[string]any{"tools": map[string]any{}, "resources": map[string]any{},
				"extensions": map[string]any{gateway.SkillsExtension: map[string]any{"directoryRead": true}}}}
	case "ping":
		result = map[string]any{}
	case "tools/list":
		result = map[string]any{"tools": []any{}}
	case "resources/list":
		result = map[string]any{"resources": []any{map[string]any{"uri": demoSkill, "name": "demo"}}}
	case "resources/templates/list":
		result = map[string]any{"resourceTemplates": []any{}}
	case "skills/list", "skills/get", "resources/directory/read":
		s.mu.Lock()
		s.ops = append(s.ops, strings.TrimSpace(m.Method+" "+m.Params.URI))
		s.mu.Unlock()
		switch {
		case m.Method == "skills/list":
			result = map[string]any{"skills": []any{entry}}
		case m.Method == "skills/get" && m.Params.URI == demoSkill:
			result = map[string]any{"skill": entry, "ttlMs": 5000, "cacheScope": "public"}
		case m.Method == "resources/directory/read" && m.Params.URI == "skill://demo":
			result = map[string]any{"resources": []any{map[string]any{"uri": demoSkill, "name": "SKILL.md"}}}
		default:
			rpcErr = map[string]any{"code": -32602, "message": "unknown skill"}
		}
	default:
		rpcErr = map[string]any{"code": -32601, "message": "method not found"}
	}
	body := map[string]any{"jsonrpc": "2.0", "id": m.ID}
	if rpcErr != nil {
		body["error"] = rpcErr
	} else {
		body["result"] = result
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(body)
}

func (s *skillServer) operations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ops)
}

// startSkills serves a gateway whose agent "assistant" uses a skillServer.
func startSkills(t *testing.T) (*harness, *skillServer) {
	t.Helper()
	up := &skillServer{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	h := &harness{t: t, url: srv.URL}
	h.dir = project(t, srv.URL, "")
	h.serve(gateway.Config{})
	return h, up
}

// The skills methods pass through as the reads they are: a caller who may read the server gets
// its skills, one who may not gets an empty list and, for one skill, exactly the answer of an
// unknown skill; the upstream sees only what the policy allowed, and every decision is logged.
func TestSkillsPassThrough(t *testing.T) {
	h, up := startSkills(t)
	alice, bob := h.client("assistant", aliceKey), h.client("assistant", bobKey)
	ext := alice.GetServerCapabilities().Extensions[gateway.SkillsExtension]
	if settings, _ := ext.(map[string]any); settings["directoryRead"] != true {
		t.Fatalf("capabilities.extensions: %+v, want the skills extension with directoryRead", alice.GetServerCapabilities().Extensions)
	}
	unknown := map[string]any{"uri": "skill://nothing/SKILL.md"}
	_, bobUnknown := rpc(t, bob, "skills/get", unknown)
	for _, tc := range []struct {
		name     string
		c        *client.Client
		method   string
		params   any
		want     string // a substring of the result; "" for an error
		code     int    // the error's code
		sameAs   *mcp.JSONRPCErrorDetails
		upstream []string // what the upstream sees
	}{
		{"alice lists", alice, "skills/list", map[string]any{}, `"uri":"skill://demo/SKILL.md"`, 0, nil, []string{"skills/list"}},
		{"alice gets", alice, "skills/get", map[string]any{"uri": demoSkill}, `"name":"demo"`, 0, nil, []string{"skills/get " + demoSkill}},
		{"alice gets an unknown skill", alice, "skills/get", unknown, "", mcp.INVALID_PARAMS, nil, []string{"skills/get skill://nothing/SKILL.md"}},
		{"alice reads a directory", alice, "resources/directory/read", map[string]any{"uri": "skill://demo"}, `"name":"SKILL.md"`, 0, nil, []string{"resources/directory/read skill://demo"}},
		{"no uri", alice, "skills/get", map[string]any{}, "", mcp.INVALID_PARAMS, nil, nil},
		{"bob lists nothing", bob, "skills/list", map[string]any{}, `"skills":[]`, 0, nil, nil},
		{"bob gets a skill as an unknown one", bob, "skills/get", map[string]any{"uri": demoSkill}, "", mcp.INVALID_PARAMS, bobUnknown, nil},
		{"bob reads no directory", bob, "resources/directory/read", map[string]any{"uri": "skill://demo"}, "", mcp.INVALID_PARAMS, bobUnknown, nil},
	} {
		before := len(up.operations())
		res, rpcErr := rpc(t, tc.c, tc.method, tc.params)
		switch {
		case tc.want != "" && (rpcErr != nil || !strings.Contains(string(res), tc.want)):
			t.Errorf("%s: %s %+v, want %s", tc.name, res, rpcErr, tc.want)
		case tc.want == "" && (rpcErr == nil || rpcErr.Code != tc.code):
			t.Errorf("%s: %s %+v, want code %d", tc.name, res, rpcErr, tc.code)
		case tc.sameAs != nil && rpcErr.Message != tc.sameAs.Message:
			t.Errorf("%s: %q, want the answer of an unknown skill %q", tc.name, rpcErr.Message, tc.sameAs.Message)
		}
		if got := up.operations()[before:]; !slices.Equal(got, tc.upstream) {
			t.Errorf("%s: the upstream saw %q, want %q", tc.name, got, tc.upstream)
		}
	}
	for _, tc := range []struct{ principal, action, outcome string }{
		{"user:alice", "resources/list", "allow"},
		{"user:alice", "resources/read", "allow"},
		{"user:bob", "resources/list", "deny"},
		{"user:bob", "resources/read", "deny"},
	} {
		if recs := h.events(decisionlog.Filter{Principal: tc.principal, Action: tc.action, Outcome: tc.outcome, Tool: "mcp://tests.internal/mcp"}); len(recs) == 0 {
			t.Errorf("no %s %s decision of %s logged", tc.outcome, tc.action, tc.principal)
		}
	}
}

// A 2026-07-28 client finds the extension in server/discover, and the skills results are
// private whatever the server said.
func TestSkillsStateless(t *testing.T) {
	h, _ := startSkills(t)
	post := func(method, params string) map[string]any {
		body := `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{` + statelessMeta + params + `}}`
		_, out := h.post("assistant", body, map[string]string{"X-API-Key": aliceKey, "Mcp-Method": method, "Mcp-Protocol-Version": "2026-07-28"})
		return out
	}
	discover, _ := json.Marshal(post("server/discover", ""))
	if !strings.Contains(string(discover), `"`+gateway.SkillsExtension+`":{"directoryRead":true}`) {
		t.Fatalf("server/discover: %s, no skills extension", discover)
	}
	for _, tc := range []struct{ method, params string }{
		{"skills/list", ""},
		{"skills/get", `,"uri":"` + demoSkill + `"`},
		{"resources/directory/read", `,"uri":"skill://demo"`},
	} {
		res, _ := post(tc.method, tc.params)["result"].(map[string]any)
		if res["cacheScope"] != "private" || res["ttlMs"] == nil {
			t.Errorf("%s: %+v, want private caching hints", tc.method, res)
		}
	}
}

// An agent none of whose servers serves skills neither declares the extension nor has its methods.
func TestSkillsAbsentWithoutAServer(t *testing.T) {
	h, _ := startTasks(t, "")
	c := h.client("assistant", aliceKey)
	if _, ok := c.GetServerCapabilities().Extensions[gateway.SkillsExtension]; ok {
		t.Fatalf("capabilities declare skills: %+v", c.GetServerCapabilities().Extensions)
	}
	for _, method := range []string{"skills/list", "skills/get", "resources/directory/read"} {
		if _, rpcErr := rpc(t, c, method, map[string]any{"uri": demoSkill}); rpcErr == nil || rpcErr.Code != mcp.METHOD_NOT_FOUND {
			t.Errorf("%s: %+v, want method not found", method, rpcErr)
		}
	}
}
