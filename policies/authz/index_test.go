package authz_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/lush-agents/lush/policies/authz"
)

// readQuickstart reads the quickstart bundle, its data decoded afresh (so tests may edit it).
func readQuickstart(t *testing.T) bundle.Bundle {
	t.Helper()
	b, err := bundle.NewReader(bytes.NewReader(quickstart(t))).WithSkipBundleVerification(true).WithProcessAnnotations(true).Read()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func lushData(b bundle.Bundle) map[string]any { return b.Data["lush"].(map[string]any) }

// TestCompiledIndexIsIndexOfProject: the compiler writes authz.Index of the project it writes.
func TestCompiledIndexIsIndexOfProject(t *testing.T) {
	d := lushData(readQuickstart(t))
	got, _ := json.Marshal(d["index"])
	var project any
	raw, _ := json.Marshal(d["project"])
	if err := json.Unmarshal(raw, &project); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(authz.Index(project))
	if !bytes.Equal(got, want) {
		t.Fatalf("bundle index\n%s\nIndex(project)\n%s", got, want)
	}
	if !strings.Contains(string(got), `"read_text_file":{"principals":{`) {
		t.Fatalf("the quickstart's index admits no read_text_file: %s", got)
	}
}

// TestEngineRefusesEditedIndex: a bundle whose index is not the one its project gives (edited by
// hand, or left from an older project) is refused, as it could let the fast path allow what the
// rules deny; without an index the bundle loads and decides as with it.
func TestEngineRefusesEditedIndex(t *testing.T) {
	ctx := context.Background()
	edits := map[string]func(d map[string]any){
		"principal added": func(d map[string]any) {
			e := d["index"].(map[string]any)["read"].(map[string]any)["researcher"].(map[string]any)[fs].(map[string]any)["names"].(map[string]any)["read_text_file"].(map[string]any)
			e["principals"].(map[string]any)["user:mallory"] = true
		},
		"execute added": func(d map[string]any) {
			d["index"].(map[string]any)["execute"].(map[string]any)["researcher"].(map[string]any)["group:everyone"] = true
		},
		"name added": func(d map[string]any) {
			d["index"].(map[string]any)["read"].(map[string]any)["researcher"].(map[string]any)[fs].(map[string]any)["names"].(map[string]any)["write_file"] =
				map[string]any{"risk": "read", "principals": map[string]any{"group:engineering": true}}
		},
		"entry removed (stale)": func(d map[string]any) {
			delete(d["index"].(map[string]any)["read"].(map[string]any), "researcher")
		},
		"grant removed from the project (stale index)": func(d map[string]any) {
			delete(d["project"].(map[string]any)["grants"].(map[string]any), fs)
		},
		"index not an object": func(d map[string]any) { d["index"] = "x" },
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			b := readQuickstart(t)
			edit(lushData(b))
			if _, err := authz.New(ctx, &b); err == nil || !strings.Contains(err.Error(), "data.lush.index does not match") {
				t.Fatalf("engine over an edited index: %v", err)
			}
			// The same through a bundle file, as lushctl loads one.
			var buf bytes.Buffer
			if err := bundle.NewWriter(&buf).Write(b); err != nil {
				t.Fatal(err)
			}
			if _, err := authz.FromBytes(ctx, buf.Bytes()); err == nil {
				t.Fatal("FromBytes accepted a bundle with an edited index")
			}
		})
	}

	b := readQuickstart(t)
	delete(lushData(b), "index")
	without, err := authz.New(ctx, &b, authz.Cache(0))
	if err != nil {
		t.Fatalf("a bundle without an index: %v", err)
	}
	with, err := authz.FromBytes(ctx, quickstart(t), authz.Cache(0))
	if err != nil {
		t.Fatal(err)
	}
	eng := authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}
	for _, name := range []string{"read_text_file", "list_directory", "write_file", "move_file", "search_files", ""} {
		for _, p := range []authz.Principal{eng, {ID: "user:alice"}, {ID: "user:eve"}, {ID: "serviceaccount:digest-bot"}} {
			for _, agent := range []string{"researcher", "orchestrator", "notifier"} {
				in := authz.Input{Action: "tools/call", Principal: p, Agent: agent, Chain: []string{agent}, Depth: 1,
					Tool: &authz.Tool{Ref: fs, Name: name}, Arguments: map[string]any{"path": "q3.md"}}
				a, b := with.Decide(ctx, in), without.Decide(ctx, in)
				ja, _ := json.Marshal(a)
				jb, _ := json.Marshal(b)
				if !bytes.Equal(ja, jb) {
					t.Fatalf("%+v:\nwith the index    %s\nwithout it        %s", in, ja, jb)
				}
			}
		}
	}
}
