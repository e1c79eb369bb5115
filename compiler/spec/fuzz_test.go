package spec

import (
	"testing"

	"github.com/lush-agents/lush/internal/diag"
)

// The fuzz targets check that no input crashes a parser, that every diagnostic points into the
// file it came from, and that a parser that reports no error returned a value.

func checkDiagnostics(t *testing.T, file string, data []byte, l *diag.List) {
	t.Helper()
	for _, d := range l.Sorted() {
		if d.File != file {
			t.Fatalf("diagnostic for another file: %v", d)
		}
		if d.Message == "" || d.Code == "" {
			t.Fatalf("diagnostic without message or code: %+v", d)
		}
	}
}

func FuzzParseAgent(f *testing.F) {
	f.Add([]byte(goodAgent))
	f.Add([]byte("name: a\nmodel: m\ndescription: d\ntools:\n  - &x {server: lush://b, access: read}\n  - <<: *x\n"))
	f.Add([]byte("name: [\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("---\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var l diag.List
		a := ParseAgent("agents/a/spec.yaml", "a", data, &l)
		checkDiagnostics(t, "agents/a/spec.yaml", data, &l)
		if !l.HasErrors() && a == nil {
			t.Fatal("no error and no agent")
		}
	})
}

func FuzzParseLoop(f *testing.F) {
	f.Add([]byte("name: l\nschedule: \"0 9 * * *\"\nagent: a\nrun_as: serviceaccount:b\ninstruction: go\n"))
	f.Add([]byte("schedule: \"CRON_TZ=Nowhere/Zone @every 1s\"\n"))
	f.Add([]byte("schedule: \"@every -1s\"\n"))
	f.Add([]byte("name: l\nschedule: \"@every 3m\"\nagent: a\nrun_as: serviceaccount:b\ninstruction: go\nconcurrency: 2\noverlap: queue\ntimeout: 10m\ncatch_up: 0s\nphase: 1m\n"))
	f.Add([]byte("phase: 3m\nschedule: \"@every 3m\"\ntimeout: 1500us\ncatch_up: -1h\nconcurrency: 0\n"))
	f.Add([]byte("schedule: \"@hourly\"\nphase: 1m\ntimeout: 10\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var l diag.List
		lp := ParseLoop("loops/l.yaml", "l", data, &l)
		checkDiagnostics(t, "loops/l.yaml", data, &l)
		if !l.HasErrors() && lp == nil {
			t.Fatal("no error and no loop")
		}
	})
}

func FuzzParseProjectConfig(f *testing.F) {
	f.Add([]byte(goodProject))
	f.Add([]byte("project: p\ntool_classes:\n  mcp://npx/x: {\"*\": {risk: network}}\n"))
	f.Add([]byte("project: p\nmcp_credentials:\n  mcp://npx/x:\n    user:a: {type: env, env: [A]}\n"))
	f.Add([]byte("project: p\nroles:\n  audit: [group:auditors, user:carol]\n  approve: &a [group:security]\n  auditt: *a\n"))
	f.Add([]byte("project: p\nbudgets:\n  - {name: b-1, agent: a, tokens: 10, per: day}\n  - name: c\n    principal: \"*\"\n    credits: 5\n    per: month\n    costs: {mcp://x/mcp: {t: 2}, tools/y: 3}\n"))
	f.Add([]byte("project: p\nbudgets:\n  - {name: B, agent: a, principal: user:x, tokens: -1, tool_calls: 1.5, per: fortnight, costs: [1]}\n  - name\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var l diag.List
		p := ParseProjectConfig("lush.yaml", data, &l)
		checkDiagnostics(t, "lush.yaml", data, &l)
		if !l.HasErrors() && p == nil {
			t.Fatal("no error and no config")
		}
	})
}

func FuzzParseLocalTool(f *testing.F) {
	f.Add([]byte("description: d\ncommand: [./run, --x]\ninput_schema: {type: object}\n"))
	f.Add([]byte("description: d\ncommand: x\ninput_schema: {a: !!binary aGk=}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var l diag.List
		tool := ParseLocalTool("tools/t/tool.yaml", "tools/t", "t", data, &l)
		checkDiagnostics(t, "tools/t/tool.yaml", data, &l)
		if !l.HasErrors() && tool == nil {
			t.Fatal("no error and no tool")
		}
	})
}
