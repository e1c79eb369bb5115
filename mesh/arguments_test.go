package mesh_test

import (
	"strings"
	"testing"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/mesh"
)

const (
	notes = "mcp://notes.internal/mcp" // reads by default; "save" writes
	docs  = "mcp://docs.internal/mcp"  // no default class: unknown tools are writes
	wiki  = "mcp://wiki.internal/mcp"  // a policy reads the arguments of "search"
	risky = "mcp://risky.internal/mcp" // reads of risk network, which needs approval
	other = "mcp://other.internal/mcp" // not in the agent's allowlist
)

func argumentsManifest() *manifest.Manifest {
	remote := func(ref string, classes map[string]manifest.Class) manifest.Tool {
		return manifest.Tool{Ref: ref, Kind: "mcp", Classes: classes,
			Remote: &manifest.Remote{URL: "https://" + strings.TrimPrefix(ref, "mcp://"), Transport: "streamable-http"}}
	}
	read := manifest.Class{Access: "read", Risk: "read"}
	return &manifest.Manifest{
		Authorization: manifest.Authorization{ApprovalRequiredFor: []string{"destructive", "network"}},
		Agents: []manifest.Agent{
			{Name: "writer", Tools: []manifest.AllowedTool{{Ref: notes, Access: "write"}, {Ref: docs, Access: "write"},
				{Ref: wiki, Access: "read"}, {Ref: risky, Access: "read"}}},
			{Name: "reader", Tools: []manifest.AllowedTool{{Ref: notes, Access: "read"}, {Ref: docs, Access: "read", Only: []string{"get"}}}},
		},
		Tools: []manifest.Tool{
			remote(notes, map[string]manifest.Class{"*": read, "save": {Access: "write", Risk: "write"}}),
			remote(docs, map[string]manifest.Class{"get": read}),
			remote(wiki, map[string]manifest.Class{"*": read}),
			remote(risky, map[string]manifest.Class{"*": {Access: "read", Risk: "network"}}),
			remote(other, map[string]manifest.Class{"*": read}),
		},
		ArgumentReads: &manifest.ArgumentReads{Tools: []manifest.ToolArguments{{Ref: wiki, Names: []string{"search"}}}},
	}
}

// TestArgumentsNeeded: a tools/call needs its arguments when a policy reads them, when it may
// run as a write, or when its risk needs approval; a call the allowlist refuses needs none.
func TestArgumentsNeeded(t *testing.T) {
	for _, tc := range []struct {
		agent, ref, name string
		want             string // "" when the arguments are not needed, else a word of the reason
	}{
		{"writer", notes, "list", ""},
		{"writer", notes, "save", "is a write"},
		{"reader", notes, "save", ""}, // a write by a read-only entry: denied whatever the arguments
		{"writer", docs, "get", ""},
		{"writer", docs, "anything", "is a write"}, // no class: unknown, a write
		{"reader", docs, "anything", ""},           // outside only:
		{"writer", wiki, "search", "a policy reads"},
		{"writer", wiki, "page", ""},
		{"writer", risky, "fetch", "needs a person's approval"},
		{"writer", other, "x", ""}, // not in the allowlist
		{"nobody", notes, "list", ""},
	} {
		need, why := mesh.ArgumentsNeeded(argumentsManifest(), tc.agent, tc.ref, tc.name)
		if need != (tc.want != "") || !strings.Contains(why, tc.want) {
			t.Errorf("%s, %s (%s): %v %q, want %q", tc.agent, tc.ref, tc.name, need, why, tc.want)
		}
	}
	old := argumentsManifest()
	old.ArgumentReads = nil
	if need, why := mesh.ArgumentsNeeded(old, "writer", notes, "list"); !need || !strings.Contains(why, "rebuild") {
		t.Errorf("a build without argument_reads: %v %q; want every call to need its arguments", need, why)
	}
}

// TestRouteBody: a server route asks for the body when some call the agent may make of the
// server needs its arguments; agent routes always, gateway routes never.
func TestRouteBody(t *testing.T) {
	got := map[string]bool{}
	for _, r := range mesh.Routes(argumentsManifest()).Routes {
		got[r.Agent+" "+string(r.Kind)+" "+r.Tool] = r.Body
	}
	for route, want := range map[string]bool{
		"writer mcp " + notes: true,  // save is a write
		"writer mcp " + docs:  true,  // unknown tools are writes
		"writer mcp " + wiki:  true,  // a policy reads search's arguments
		"writer mcp " + risky: true,  // approval
		"reader mcp " + notes: false, // writes are refused: every read is decided from headers
		"reader mcp " + docs:  false, // only get, a read
		"writer agent ":       true,
		"reader agent ":       true,
	} {
		if b, ok := got[route]; !ok || b != want {
			t.Errorf("%s: Body %v (route there: %v), want %v", route, b, ok, want)
		}
	}
}
