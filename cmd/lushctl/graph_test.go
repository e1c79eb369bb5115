package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestGraph(t *testing.T) {
	dir := quickstartCopy(t)
	r := lushctl(t, "", "graph", dir)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "// Who may call whom") || !strings.Contains(r.stdout, `label="calls (read)"`) {
		t.Errorf("dot: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = lushctl(t, "", "graph", "--format", "mermaid", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "flowchart LR") {
		t.Errorf("mermaid: %d %s", r.code, r.stderr)
	}
	r = lushctl(t, "", "graph", "--format", "json", dir)
	var g struct {
		Nodes []struct{ ID, Kind string }
		Edges []struct{ From, To, Kind string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &g); err != nil || len(g.Nodes) == 0 || len(g.Edges) == 0 {
		t.Errorf("json: %v %s", err, r.stdout)
	}
	if r := lushctl(t, "", "graph", "--format", "png", dir); r.code != exitUsage || !strings.Contains(r.stderr, "--format") {
		t.Errorf("bad format: %d %s", r.code, r.stderr)
	}
	if r := lushctl(t, "", "graph", "--build", "0000", dir); r.code != exitUsage {
		t.Errorf("unknown build: %d %s", r.code, r.stderr)
	}
	if r := lushctl(t, "", "graph", "../../examples/errors/acl"); r.code != exitFailed {
		t.Errorf("broken project: %d %s", r.code, r.stderr)
	}
}
