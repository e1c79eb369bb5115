package compiler_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/lush-agents/lush/compiler"
)

// TestReachA2A: the build fetches a remote A2A agent's Agent Card (served on loopback, the good
// one by a2a-go's own handler) and reports what is wrong with it at the reference's file:line.
// The diagnostics are in testdata/a2a/<case>.txt, the server's port written as PORT (go test
// ./compiler -run ReachA2A -update after an intended change).
func TestReachA2A(t *testing.T) {
	good := func(base string) *a2a.AgentCard {
		return &a2a.AgentCard{Name: "travel", Description: "books trips", URL: base + "/a2a", Version: "1.0.0", ProtocolVersion: "0.3.0",
			PreferredTransport: a2a.TransportProtocolJSONRPC, DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
			Skills: []a2a.AgentSkill{{ID: "book", Name: "book", Description: "books a trip", Tags: []string{"travel"}}}}
	}
	raw := func(status int, body string) func(string) http.Handler {
		return func(string) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_, _ = w.Write([]byte(body))
			})
		}
	}
	card := func(edit func(c *a2a.AgentCard)) func(string) http.Handler {
		return func(base string) http.Handler {
			c := good(base)
			edit(c)
			return a2asrv.NewStaticAgentCardHandler(c)
		}
	}
	tests := []struct {
		name    string
		handler func(base string) http.Handler // serves the card; base is the server's URL
		ok      bool
	}{
		{"good", card(func(*a2a.AgentCard) {}), true},
		{"missing-fields", card(func(c *a2a.AgentCard) { c.Name, c.Version, c.ProtocolVersion, c.Skills = "", "", "", nil }), false},
		{"grpc-only", card(func(c *a2a.AgentCard) { c.PreferredTransport = a2a.TransportProtocolGRPC }), false},
		{"grpc-preferred-jsonrpc-additional", card(func(c *a2a.AgentCard) {
			c.PreferredTransport = a2a.TransportProtocolGRPC
			c.AdditionalInterfaces = []a2a.AgentInterface{{Transport: a2a.TransportProtocolJSONRPC, URL: c.URL}}
		}), true},
		{"remote-http-endpoint", card(func(c *a2a.AgentCard) { c.URL = "http://agents.example.com/a2a" }), false},
		{"endpoint-with-credentials", card(func(c *a2a.AgentCard) { c.URL = strings.Replace(c.URL, "http://", "http://u:p@", 1) }), false},
		{"not-found", raw(http.StatusNotFound, "{}"), false},
		{"unauthorized", raw(http.StatusUnauthorized, "{}"), true}, // a warning: mcp_credentials declares none
		{"unauthorized-declared", raw(http.StatusUnauthorized, "{}"), true},
		{"not-json", raw(http.StatusOK, "<html>"), false},
		{"too-large", raw(http.StatusOK, `{"name":"`+strings.Repeat("x", 1<<20)+`"}`), false},
		{"redirect", func(string) http.Handler {
			return http.RedirectHandler("https://elsewhere.example.com/card", http.StatusFound)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mux := http.NewServeMux()
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			mux.Handle("GET /agent"+a2asrv.WellKnownAgentCardPath, tt.handler(srv.URL))
			host := strings.TrimPrefix(srv.URL, "http://")
			ref := "a2a+http://" + host + "/agent"
			extra := "tool_grants:\n  - tool: " + ref + "\n    grants:\n      - principal: group:engineering\n        access: write\n"
			if strings.HasSuffix(tt.name, "-declared") {
				extra += "mcp_credentials:\n  " + ref + ":\n    group:engineering: {type: bearer}\n"
			}
			dir := reachProject(t, ref, "write", "", extra)

			res := buildOnline(t, dir)
			if res.OK() != tt.ok {
				t.Errorf("build ok = %v, want %v:\n%s", res.OK(), tt.ok, render(res.Diagnostics))
			}
			got := strings.ReplaceAll(render(res.Diagnostics), host, "HOST") + "\n"
			golden := filepath.Join("testdata", "a2a", tt.name+".txt")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("diagnostics differ from %s (run with -update if the change is intended)\n--- got\n%s--- want\n%s", golden, got, want)
			}

			// --offline skips the card.
			off := buildOnline(t, dir, compiler.Offline(true))
			if !off.OK() {
				t.Errorf("offline build failed:\n%s", render(off.Diagnostics))
			}
		})
	}
}

// TestA2AClasses: sending a message to an A2A agent is a write unless tool_classes says
// otherwise, so a read-only entry is warned about until the agent is classified read; and an A2A
// agent is listed with server:, not name:, and cannot be narrowed to named tools.
func TestA2AClasses(t *testing.T) {
	const ref = "a2a://agents.example.com/travel"
	grants := "tool_grants:\n  - tool: " + ref + "\n    grants:\n      - principal: group:engineering\n        access: read\n"
	tests := []struct {
		name, access, only, extra string
		ok                        bool
		code                      string // a diagnostic the build must report; "" for none
	}{
		{"unclassified read", "read", "", grants, true, "unreachable-tool"},
		{"classified read", "read", "", grants + "tool_classes:\n  " + ref + ": read\n", true, ""},
		{"write", "write", "", grants, true, ""},
		{"narrowed", "write", "book", grants, false, "narrowing-single-tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := buildOnline(t, reachProject(t, ref, tt.access, tt.only, tt.extra), compiler.Offline(true))
			cs := codes(res)
			if res.OK() != tt.ok {
				t.Errorf("ok = %v, want %v:\n%s", res.OK(), tt.ok, render(res.Diagnostics))
			}
			if _, has := cs["unreachable-tool"]; tt.code == "" && has {
				t.Errorf("unexpected unreachable-tool:\n%s", render(res.Diagnostics))
			}
			if _, has := cs[tt.code]; tt.code != "" && !has {
				t.Errorf("want %s:\n%s", tt.code, render(res.Diagnostics))
			}
		})
	}
	dir := t.TempDir()
	writeFile(t, dir, "lush.yaml", "project: p\n")
	writeFile(t, dir, "agents/a/spec.yaml", "name: a\nmodel: gemini-2.5-flash\ndescription: d\ntools:\n  - name: "+ref+"\n    access: write\nacl:\n  - principal: group:engineering\n    role: execute\n")
	if _, has := codes(buildOnline(t, dir, compiler.Offline(true)))["wrong-key"]; !has {
		t.Error("name: a2a://… is not reported as wrong-key")
	}
}
