package mesh_test

import (
	"strings"
	"testing"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/mesh"
)

func testManifest() *manifest.Manifest {
	return &manifest.Manifest{
		Agents: []manifest.Agent{
			{Name: "assistant", Tools: []manifest.AllowedTool{
				{Ref: "mcp://notes.internal/mcp"}, {Ref: "mcp://notes.internal/mcp#work"}, {Ref: "mcp://api.example.com/v1/mcp"},
				{Ref: "mcp://legacy.example.com/sse"}, {Ref: "mcp://npx/@modelcontextprotocol/server-memory"}, {Ref: "lush://helper"},
			}},
			{Name: "helper", Tools: []manifest.AllowedTool{{Ref: "lush://assistant"}}},
		},
		Tools: []manifest.Tool{
			{Ref: "mcp://notes.internal/mcp", Kind: "mcp", Remote: &manifest.Remote{URL: "http://10.0.0.5:8080/mcp", Transport: "streamable-http"}},
			{Ref: "mcp://notes.internal/mcp#work", Kind: "mcp", Remote: &manifest.Remote{URL: "https://notes.internal/mcp", Transport: "streamable-http"}},
			{Ref: "mcp://api.example.com/v1/mcp", Kind: "mcp", Remote: &manifest.Remote{URL: "https://api.example.com/v1/mcp", Transport: "streamable-http"}},
			{Ref: "mcp://legacy.example.com/sse", Kind: "mcp", Remote: &manifest.Remote{URL: "https://legacy.example.com/sse", Transport: "sse"}},
			{Ref: "mcp://npx/@modelcontextprotocol/server-memory", Kind: "mcp"},
			{Ref: "lush://helper", Kind: "agent"}, {Ref: "lush://assistant", Kind: "agent"},
		},
	}
}

func TestRoutes(t *testing.T) {
	tab := mesh.Routes(testManifest())
	var got []string
	for _, r := range tab.Routes {
		got = append(got, string(r.Kind)+" "+r.Path+" "+r.Tool)
	}
	want := []string{
		"mcp /agents/assistant/tools/api/mcp mcp://api.example.com/v1/mcp",
		"mcp /agents/assistant/tools/notes/mcp mcp://notes.internal/mcp",
		"mcp /agents/assistant/tools/work/mcp mcp://notes.internal/mcp#work",
		"gateway /gateway/agents/assistant/ ",
		"a2a /agents/assistant/a2a ",
		"a2a /agents/assistant/.well-known ",
		"a2a /agents/helper/a2a ",
		"a2a /agents/helper/.well-known ",
		"agent /agents/assistant/ ",
		"agent /agents/helper/ ",
	}
	if len(got) != len(want) {
		t.Fatalf("routes:\n%q\nwant\n%q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("route %d: %q, want %q", i, got[i], want[i])
		}
	}
}

func TestMatch(t *testing.T) {
	tab := mesh.Routes(testManifest())
	for _, tc := range []struct {
		path, kind, agent, tool string
	}{
		{"/agents/assistant/tools/notes/mcp", "mcp", "assistant", "mcp://notes.internal/mcp"},
		{"/agents/assistant/tools/notes/mcp?session=1", "mcp", "assistant", "mcp://notes.internal/mcp"},
		{"/agents/helper/chat", "agent", "helper", ""},
		{"/agents/helper/mcp", "agent", "helper", ""},
		{"/gateway/agents/assistant/mcp", "gateway", "assistant", ""},
		{"/agents/helper/a2a", "a2a", "helper", ""},
		{"/agents/helper/a2a/.well-known/agent-card.json", "a2a", "helper", ""},
		{"/agents/helper/.well-known/agent-card.json", "a2a", "helper", ""},
		{"/agents/helper/a2abc", "agent", "helper", ""},
		{"/agents/helper/.well-knownx", "agent", "helper", ""},
		{"/agents/nobody/a2a", "", "", ""},
		{"/agents/assistant/tools/nope/mcp", "", "", ""},
		{"/agents/helper/../assistant/tools/notes/mcp", "", "", ""},
		{"/agents/helper//chat", "", "", ""},
		{"/agents/nobody/chat", "", "", ""},
		{"/gateway/agents/nobody/mcp", "", "", ""},
		{"/other", "", "", ""},
	} {
		r, ok := tab.Match(tc.path)
		if ok != (tc.kind != "") || string(r.Kind) != tc.kind || r.Agent != tc.agent || r.Tool != tc.tool {
			t.Errorf("%s: %v %+v, want %s %s %s", tc.path, ok, r, tc.kind, tc.agent, tc.tool)
		}
	}
}

// Two servers of an agent that would share a slug are told apart by a digest of the reference;
// the same build always gets the same paths.
func TestSlugCollision(t *testing.T) {
	m := &manifest.Manifest{
		Agents: []manifest.Agent{{Name: "a", Tools: []manifest.AllowedTool{{Ref: "mcp://notes.example.com/mcp"}, {Ref: "mcp://notes.example.org/mcp"}}}},
		Tools: []manifest.Tool{
			{Ref: "mcp://notes.example.com/mcp", Kind: "mcp", Remote: &manifest.Remote{URL: "https://notes.example.com/mcp"}},
			{Ref: "mcp://notes.example.org/mcp", Kind: "mcp", Remote: &manifest.Remote{URL: "https://notes.example.org/mcp"}},
		},
	}
	first := mesh.Routes(m).Routes
	if first[0].Path != "/agents/a/tools/notes/mcp" || first[1].Path == first[0].Path || !strings.HasPrefix(first[1].Path, "/agents/a/tools/notes-") {
		t.Fatalf("paths %s, %s", first[0].Path, first[1].Path)
	}
	again := mesh.Routes(m).Routes
	for i := range first {
		if first[i].Path != again[i].Path {
			t.Errorf("route %d: %s, then %s", i, first[i].Path, again[i].Path)
		}
	}
	tab := mesh.Routes(m)
	if r, ok := tab.Match(first[1].Path); !ok || r.Tool != "mcp://notes.example.org/mcp" {
		t.Errorf("match %s: %+v %v", first[1].Path, r, ok)
	}
}
