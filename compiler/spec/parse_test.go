package spec

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/diag"
)

// render prints diagnostics one per line as "line:col code: message (suggestion)".
func render(l *diag.List) string {
	var b strings.Builder
	for _, d := range l.Sorted() {
		fmt.Fprintf(&b, "%d:%d %s %s: %s", d.Line, d.Col, d.Severity, d.Code, d.Message)
		if d.Suggestion != "" {
			fmt.Fprintf(&b, " (%s)", d.Suggestion)
		}
		b.WriteString("\n")
	}
	return b.String()
}

const goodAgent = `name: researcher
model: gemini-2.5-flash
description: |
  You research things.
skills:
  - skills.sh/lush/concise-writing@1.0
tools:
  - server: mcp://npx/@modelcontextprotocol/server-filesystem
    access: write
    tools:
      - read_text_file
      - name: write_file
        risk: destructive
  - server: lush://writer
    access: read
  - name: tools/clock
    access: read
acl:
  - principal: group:engineering
    role: execute
`

func TestParseAgent(t *testing.T) {
	var l diag.List
	a := ParseAgent("agents/researcher/spec.yaml", "researcher", []byte(goodAgent), &l)
	if got := render(&l); got != "" {
		t.Fatalf("diagnostics:\n%s", got)
	}
	if a.Name.Value != "researcher" || a.Model.Value != "gemini-2.5-flash" || a.Description.Value != "You research things.\n" {
		t.Errorf("scalars = %+v", a)
	}
	if a.Model.Pos != (diag.Pos{File: "agents/researcher/spec.yaml", Line: 2, Col: 8}) {
		t.Errorf("model pos = %v", a.Model.Pos)
	}
	if len(a.Tools) != 3 || len(a.Skills) != 1 || len(a.ACL) != 1 {
		t.Fatalf("tools=%d skills=%d acl=%d", len(a.Tools), len(a.Skills), len(a.ACL))
	}
	fs := a.Tools[0]
	if fs.Access.Value != "write" || len(fs.Only) != 2 || fs.Only[0].Class != nil {
		t.Fatalf("filesystem entry = %+v", fs)
	}
	if c := fs.Only[1].Class; c == nil || c.Access.Value != "write" || c.Risk.Value != "destructive" {
		t.Errorf("write_file class = %+v", c)
	}
	if a.Tools[2].Ref.Value != "tools/clock" || a.Tools[2].Access.Value != "read" {
		t.Errorf("local tool entry = %+v", a.Tools[2])
	}
}

func TestParseFileToolPaths(t *testing.T) {
	src := "name: a\nmodel: m\ndescription: d\ntools:\n" +
		"  - name: builtin/file_read\n    access: read\n    paths: [data, ./docs/public/, \"docs//public\", data/.]\n" +
		"  - name: builtin/file_write\n    access: write\n    paths:\n      - drafts\n" +
		"  - name: builtin/file_list\n    access: read\n    paths: [.]\n"
	var l diag.List
	a := ParseAgent("agents/a/spec.yaml", "a", []byte(src), &l)
	if got := render(&l); got != "" {
		t.Fatalf("diagnostics:\n%s", got)
	}
	var got [][]string
	for _, e := range a.Tools {
		var ps []string
		for _, p := range e.Paths {
			ps = append(ps, p.Value)
		}
		got = append(got, ps)
	}
	want := fmt.Sprint([][]string{{"data", "docs/public", "docs/public", "data"}, {"drafts"}, {"."}})
	if fmt.Sprint(got) != want {
		t.Errorf("paths = %v, want %v", got, want)
	}
	if p := a.Tools[0].Paths[1].Pos; p != (diag.Pos{File: "agents/a/spec.yaml", Line: 7, Col: 19}) {
		t.Errorf("pos of the second path = %v", p)
	}
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		".": ".", "./": ".", "data": "data", "data/": "data", "./data//x/./y/": "data/x/y",
		".github": ".github", "x/.lush": "x/.lush", ".lushrc": ".lushrc", "..x": "..x",
	} {
		if got, err := CleanPath(in); err != nil || got != want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", " ", "/", "/data", "C:/data", `C:\data`, `a\b`, "..", "../x", "a/..", "a/../b",
		"a\x00b", "a\nb", " data", "data ", ".git", ".git/hooks", "./.lush", ".lush/secrets", ".LUSH", ".Git/config"} {
		if got, err := CleanPath(in); err == nil {
			t.Errorf("CleanPath(%q) = %q, want an error", in, got)
		} else if pe, ok := err.(*PathError); !ok || pe.Hint == "" || !strings.Contains(pe.Msg, fmt.Sprintf("%q", in)) {
			t.Errorf("CleanPath(%q): error %#v must be a PathError naming the path, with a hint", in, err)
		}
	}
}

func TestParseAgentErrors(t *testing.T) {
	tests := []struct {
		name, dir, src, want string
	}{
		{"unknown field with suggestion", "a", "name: a\nmodle: x\nmodel: m\ndescription: d\n",
			`2:1 error unknown-field: unknown field "modle" in agent spec (did you mean "model"?)`},
		{"unknown field without suggestion", "a", "name: a\nmodel: m\ndescription: d\nbanana: 1\n",
			`4:1 error unknown-field: unknown field "banana" in agent spec (known fields: name, model, description, tools, skills, acl)`},
		{"missing required", "a", "name: a\n", "1:1 error missing-field: agent spec is missing required field \"model\"\n1:1 error missing-field: agent spec is missing required field \"description\""},
		{"name mismatch", "b", "name: a\nmodel: m\ndescription: d\n",
			`1:7 error name-mismatch: agent name "a" does not match its directory agents/b (rename the directory to agents/a or set name: b)`},
		{"bad name", "Ab", "name: Ab\nmodel: m\ndescription: d\n", `1:7 error invalid-name: agent name "Ab" is not valid`},
		{"number instead of string", "a", "name: a\nmodel: 1.5\ndescription: d\n", `2:8 error wrong-type: model must be a string, not a number (quote it: "1.5")`},
		{"empty description", "a", "name: a\nmodel: m\ndescription: \"  \"\n", `3:14 error empty-value: description is empty`},
		{"duplicate key", "a", "name: a\nmodel: m\nmodel: n\ndescription: d\n", `3:1 error duplicate-key: "model" is set twice in agent spec (remove one of them; the first is at line 2)`},
		{"tools not a list", "a", "name: a\nmodel: m\ndescription: d\ntools: mcp://x/y\n", `4:8 error wrong-type: tools must be a list, not a string`},
		{"access missing", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - server: lush://b\n", `5:5 error missing-field: tools entry is missing required field "access"`},
		{"access invalid", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - server: lush://b\n    access: raed\n",
			`6:13 error invalid-value: access "raed" is not valid (did you mean "read"? (one of: read, write))`},
		{"server and name", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - server: lush://b\n    name: tools/x\n    access: read\n",
			`6:11 error conflicting-fields: a tools entry has both server: and name:`},
		{"no tool", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - access: read\n", `5:5 error missing-field: tools entry names no tool`},
		{"wrong key for local tool", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - server: tools/x\n    access: read\n",
			`5:13 error wrong-key: tools/x is not a server (write name: tools/x)`},
		{"wrong key for server", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: mcp://npx/x\n    access: read\n",
			`5:11 error wrong-key: mcp://npx/x is a server: list it with server: (write server: mcp://npx/x)`},
		{"bad ref", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - server: https://x.example.com/mcp\n    access: read\n",
			`remote MCP servers are named mcp://x.example.com/mcp`},
		{"narrowing a single tool", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - server: lush://b\n    access: read\n    tools: [x]\n",
			`7:12 error narrowing-single-tool`},
		{"paths on a server", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - server: lush://b\n    access: read\n    paths: [data]\n",
			`7:12 error paths-not-file-tool: paths: applies to the file tools only, not lush://b (remove paths: from this entry; it applies to builtin/file_list, builtin/file_read, builtin/file_write)`},
		{"paths on shell", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: builtin/shell\n    access: write\n    paths: [data]\n",
			`7:12 error paths-not-file-tool: paths: applies to the file tools only, not builtin/shell`},
		{"file tool without paths", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: builtin/file_read\n    access: read\n",
			`5:11 error missing-paths: builtin/file_read needs paths: the directories it may read, relative to the project (add paths: such as [data], or [.] for the whole project)`},
		{"file tool with empty paths", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: builtin/file_list\n    access: read\n    paths: []\n",
			`7:12 error missing-paths: paths: of builtin/file_list is empty`},
		{"paths not a list", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: builtin/file_write\n    access: write\n    paths: data\n",
			`7:12 error wrong-type: paths must be a list, not a string`},
		{"absolute path", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: builtin/file_read\n    access: read\n    paths: [/etc]\n",
			`7:13 error invalid-path: path "/etc" is absolute; paths are relative to the project (write it relative to the project directory, such as "etc")`},
		{"dot-dot path", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: builtin/file_read\n    access: read\n    paths: [data/../../x]\n",
			`7:13 error invalid-path: path "data/../../x" contains ".."`},
		{"dot-dot that cleans away", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: builtin/file_read\n    access: read\n    paths: [data/../docs]\n",
			`7:13 error invalid-path: path "data/../docs" contains ".."`},
		{"backslash", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: builtin/file_read\n    access: read\n    paths: ['data\\x']\n",
			`7:13 error invalid-path: path "data\\x" contains a backslash (separate directories with /: "data/x")`},
		{"NUL", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: builtin/file_read\n    access: read\n    paths: [\"da\\0ta\"]\n",
			`7:13 error invalid-path: path "da\x00ta" contains a control character`},
		{"empty path", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: builtin/file_read\n    access: read\n    paths: [\"\"]\n",
			`7:13 error empty-value: each item of paths is empty`},
		{".lush", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: builtin/file_read\n    access: read\n    paths: [./.lush/secrets]\n",
			`7:13 error invalid-path: path "./.lush/secrets" is inside .lush, which holds the build output and secrets`},
		{".git", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - name: builtin/file_write\n    access: write\n    paths: [data, .git]\n",
			`7:19 error invalid-path: path ".git" is inside .git, which holds the repository`},
		{"bad class", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - server: mcp://npx/x\n    access: read\n    tools:\n      - name: t\n        access: write\n        risk: read\n",
			`10:15 error inconsistent-class: a tool with access write cannot have risk read`},
		{"bad tool name", "a", "name: a\nmodel: m\ndescription: d\ntools:\n  - server: mcp://npx/x\n    access: read\n    tools: [\"a b\"]\n",
			`is not an MCP tool name`},
		{"acl role", "a", "name: a\nmodel: m\ndescription: d\nacl:\n  - principal: user:x\n    role: exec\n",
			`6:11 error invalid-value: role "exec" is not valid (use one of: execute)`},
		{"not a mapping", "a", "- a\n- b\n", `1:1 error wrong-type: agent spec must be a mapping, not a list`},
		{"syntax error", "a", "name: a\nmodel: [\n", `error yaml-syntax: invalid YAML:`},
		{"empty", "a", "", `0:0 error empty-file: file is empty`},
		{"two documents", "a", "name: a\n---\nname: b\n", `multiple-documents`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l diag.List
			ParseAgent("agents/"+tt.dir+"/spec.yaml", tt.dir, []byte(tt.src), &l)
			got := render(&l)
			for _, want := range strings.Split(tt.want, "\n") {
				if !strings.Contains(got, want) {
					t.Errorf("diagnostics:\n%s\nwant a line containing:\n%s", got, want)
				}
			}
		})
	}
}

func TestMergeKeysAndAliases(t *testing.T) {
	src := `name: a
model: m
description: d
tools:
  - &fs
    server: mcp://npx/x
    access: read
  - <<: *fs
    server: mcp://npx/y
acl:
  - &eng {principal: group:eng, role: execute}
  - *eng
`
	var l diag.List
	a := ParseAgent("agents/a/spec.yaml", "a", []byte(src), &l)
	if got := render(&l); got != "" {
		t.Fatalf("diagnostics:\n%s", got)
	}
	if len(a.Tools) != 2 || a.Tools[1].Ref.Value != "mcp://npx/y" || a.Tools[1].Access.Value != "read" {
		t.Errorf("merged tool = %+v", a.Tools)
	}
	if len(a.ACL) != 2 {
		t.Errorf("acl = %+v", a.ACL)
	}
}

func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	b.WriteString("description: d\ncommand: x\ninput_schema: *a8\n")
	var l diag.List
	ParseLocalTool("tools/a/tool.yaml", "tools/a", "a", []byte(b.String()), &l)
	if got := render(&l); !strings.Contains(got, "too-many-nodes") {
		t.Errorf("an alias bomb was not stopped:\n%s", got)
	}
}

func TestParseLoop(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"good", "name: digest\nschedule: \"0 9 * * *\"\nagent: helper\nrun_as: serviceaccount:bot\ninstruction: go\nacl:\n  - principal: group:ops\n    role: read\n", ""},
		{"descriptor", "name: digest\nschedule: \"@every 15m\"\nagent: helper\nrun_as: serviceaccount:bot\ninstruction: go\n", ""},
		{"time zone", "name: digest\nschedule: \"CRON_TZ=Europe/Berlin 0 9 * * 1-5\"\nagent: helper\nrun_as: serviceaccount:bot\ninstruction: go\n", ""},
		{"six fields", "name: digest\nschedule: \"0 0 9 * * *\"\nagent: helper\nrun_as: serviceaccount:bot\ninstruction: go\n", "remove the seconds field"},
		{"bad cron", "name: digest\nschedule: \"0 25 * * *\"\nagent: helper\nrun_as: serviceaccount:bot\ninstruction: go\n", "is not valid"},
		{"lush ref", "name: digest\nschedule: \"@daily\"\nagent: lush://helper\nrun_as: serviceaccount:bot\ninstruction: go\n", "write the agent's name: agent: helper"},
		{"loop role", "name: digest\nschedule: \"@daily\"\nagent: helper\nrun_as: serviceaccount:bot\ninstruction: go\nacl:\n  - principal: group:x\n    role: trigger\n", `role "trigger" is not valid (use one of: execute, read)`},
		{"missing", "name: digest\n", `loop spec is missing required field "schedule"`},
		{"name mismatch", "name: other\nschedule: \"@daily\"\nagent: helper\nrun_as: serviceaccount:bot\ninstruction: go\n", "rename the file to loops/other.yaml or set name: digest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l diag.List
			lp := ParseLoop("loops/digest.yaml", "digest", []byte(tt.src), &l)
			got := render(&l)
			if tt.want == "" {
				if got != "" || lp == nil {
					t.Fatalf("diagnostics:\n%s", got)
				}
				return
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("diagnostics:\n%s\nwant containing %q", got, tt.want)
			}
		})
	}
}

const loopHead = "name: digest\nschedule: \"@every 3m\"\nagent: helper\nrun_as: serviceaccount:bot\ninstruction: go\n"

func TestParseLoopOptionalFields(t *testing.T) {
	var l diag.List
	src := loopHead + "concurrency: 4\noverlap: queue\ntimeout: 10m\ncatch_up: 1h\nphase: 1m\n"
	lp := ParseLoop("loops/digest.yaml", "digest", []byte(src), &l)
	if got := render(&l); got != "" {
		t.Fatalf("diagnostics:\n%s", got)
	}
	if lp.Concurrency.Value != 4 || lp.Overlap.Value != "queue" || lp.Timeout.Value != 10*time.Minute || lp.CatchUp.Value != time.Hour || lp.Phase.Value != time.Minute {
		t.Errorf("loop = %+v", lp)
	}
	if lp.Phase.Pos != (diag.Pos{File: "loops/digest.yaml", Line: 10, Col: 8}) {
		t.Errorf("phase pos = %v", lp.Phase.Pos)
	}

	// Absent fields are unset; catch_up: 0s is set, and distinct from absent.
	l = diag.List{}
	lp = ParseLoop("loops/digest.yaml", "digest", []byte(loopHead), &l)
	if lp.Concurrency.Set() || lp.Overlap.Set() || lp.Timeout.Set() || lp.CatchUp.Set() || lp.Phase.Set() {
		t.Errorf("absent fields are set: %+v", lp)
	}
	lp = ParseLoop("loops/digest.yaml", "digest", []byte(loopHead+"catch_up: 0s\n"), &l)
	if !lp.CatchUp.Set() || lp.CatchUp.Value != 0 {
		t.Errorf("catch_up: 0s = %+v", lp.CatchUp)
	}
	if got := render(&l); got != "" {
		t.Fatalf("diagnostics:\n%s", got)
	}

	// Each value at its bounds, and phase with a schedule that comes after it.
	for _, src := range []string{
		loopHead + "concurrency: 1\noverlap: skip\ntimeout: 1ms\ncatch_up: 2160h\nphase: 0s\n",
		loopHead + "concurrency: 100\ntimeout: 24h\nphase: 2m59s\n",
		"phase: 90s\nname: digest\nschedule: \"CRON_TZ=Europe/Berlin @every 2h\"\nagent: helper\nrun_as: serviceaccount:bot\ninstruction: go\n",
	} {
		l = diag.List{}
		if lp := ParseLoop("loops/digest.yaml", "digest", []byte(src), &l); lp == nil || l.HasErrors() {
			t.Errorf("%s\ndiagnostics:\n%s", src, render(&l))
		}
	}
}

func TestParseLoopOptionalFieldErrors(t *testing.T) {
	const cron = "name: digest\nschedule: \"0 9 * * *\"\nagent: helper\nrun_as: serviceaccount:bot\ninstruction: go\n"
	tests := []struct{ name, src, want string }{
		{"concurrency zero", loopHead + "concurrency: 0\n", `6:14 error invalid-value: concurrency 0 is not a whole number from 1 to 100 (write how many firings of this loop may run at once, from 1 (the default) to 100)`},
		{"concurrency too high", loopHead + "concurrency: 101\n", `6:14 error invalid-value: concurrency 101 is not a whole number from 1 to 100`},
		{"concurrency huge", loopHead + "concurrency: 99999999999999999999\n", `6:14 error invalid-value: concurrency 99999999999999999999 is not a whole number from 1 to 100`},
		{"concurrency fraction", loopHead + "concurrency: 1.5\n", `6:14 error invalid-value: concurrency 1.5 is not a whole number from 1 to 100 (write how many`},
		{"concurrency string", loopHead + "concurrency: many\n", `6:14 error wrong-type: concurrency must be a whole number, not a string`},
		{"overlap", loopHead + "overlap: queu\n", `6:10 error invalid-value: overlap "queu" is not valid (did you mean "queue"? (one of: skip, queue))`},
		{"overlap other", loopHead + "overlap: wait\n", `6:10 error invalid-value: overlap "wait" is not valid (use one of: skip, queue)`},
		{"timeout not a duration", loopHead + "timeout: ten minutes\n", `6:10 error invalid-value: timeout "ten minutes" is not a duration (write how long one firing may run, such as 90s, 10m or 1h30m)`},
		{"timeout number", loopHead + "timeout: 10\n", `6:10 error wrong-type: timeout must be a duration, not a number (write it with a unit, such as 10s or 10m)`},
		{"timeout zero", loopHead + "timeout: 0s\n", `6:10 error invalid-value: timeout "0s" must be longer than 0s (write how long one firing may run, such as 90s, 10m or 1h30m)`},
		{"timeout negative", loopHead + "timeout: -5m\n", `6:10 error invalid-value: timeout "-5m" must be longer than 0s`},
		{"timeout too long", loopHead + "timeout: 25h\n", `6:10 error invalid-value: timeout "25h" is longer than 24h (write at most 24h)`},
		{"timeout sub-millisecond", loopHead + "timeout: 1500us\n", `6:10 error invalid-value: timeout "1500us" is not a whole number of milliseconds (write e.g. 1ms)`},
		{"catch_up negative", loopHead + "catch_up: -1h\n", `6:11 error invalid-value: catch_up "-1h" must not be negative (write how old a missed firing may be and still run, such as 1h, or 0s to never run missed firings)`},
		{"catch_up not a duration", loopHead + "catch_up: true\n", `6:11 error wrong-type: catch_up must be a string, not a boolean`},
		{"catch_up empty", loopHead + "catch_up:\n", `6:10 error wrong-type: catch_up must be a string, not nothing`},
		{"phase negative", loopHead + "phase: -1m\n", `6:8 error invalid-value: phase "-1m" must not be negative`},
		{"phase not a duration", loopHead + "phase: 1 tick\n", `6:8 error invalid-value: phase "1 tick" is not a duration (write the offset of the firings within the interval, such as 1m for schedule: "@every 3m")`},
		{"phase equal to interval", loopHead + "phase: 3m\n", `6:8 error invalid-value: phase 3m is not shorter than the interval of "@every 3m" (write a phase from 0s up to (not including) 3m)`},
		{"phase longer than interval", loopHead + "phase: 1h\n", `6:8 error invalid-value: phase 1h is not shorter than the interval of "@every 3m"`},
		{"phase fraction of a second", loopHead + "phase: 1500ms\n", `6:8 error invalid-value: phase 1.5s is not a whole number of seconds (write e.g. 1s)`},
		{"phase with cron", cron + "phase: 1m\n", `6:8 error invalid-field: phase applies only to @every schedules, not to "0 9 * * *" (remove phase:, or use an interval schedule such as schedule: "@every 15m")`},
		{"phase with descriptor", "phase: 1m\n" + strings.Replace(cron, `"0 9 * * *"`, `"@hourly"`, 1), `1:8 error invalid-field: phase applies only to @every schedules, not to "@hourly"`},
		{"unknown field", loopHead + "catchup: 1h\n", `6:1 error unknown-field: unknown field "catchup" in loop spec (did you mean "catch_up"?)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l diag.List
			lp := ParseLoop("loops/digest.yaml", "digest", []byte(tt.src), &l)
			got := render(&l)
			if !strings.Contains(got, tt.want) {
				t.Errorf("diagnostics:\n%s\nwant containing %q", got, tt.want)
			}
			if n := strings.Count(got, "\n"); n != 1 {
				t.Errorf("%d diagnostics, want 1:\n%s", n, got)
			}
			if lp == nil {
				t.Error("no loop")
			}
		})
	}

	// An invalid schedule is reported once; the phase is not checked against it.
	var l diag.List
	ParseLoop("loops/digest.yaml", "digest", []byte(strings.Replace(loopHead, "@every 3m", "@every 500ms", 1)+"phase: 1m\n"), &l)
	if got := render(&l); strings.Count(got, "\n") != 1 || !strings.Contains(got, `2:11 error invalid-schedule: schedule "@every 500ms" is not valid: @every 500ms: the shortest interval is 1s`) {
		t.Errorf("diagnostics:\n%s", got)
	}
}

const goodProject = `project: quickstart
models: [gemini-2.5-flash, gemini-2.5-pro]
service_accounts:
  - name: digest-bot
    description: runs the daily digest
  - orchestrator
servers:
  mcp://npx/@modelcontextprotocol/server-filesystem:
    args: [./data]
    env: {LOG_LEVEL: info}
    timeout: 30s
  mcp://notes.example.com/mcp:
    url: http://127.0.0.1:8931/mcp
    transport: sse
tool_classes:
  mcp://npx/@modelcontextprotocol/server-filesystem:
    read_text_file: read
    write_file: {access: write, risk: destructive}
    "*": write
  tools/clock: read
tool_grants:
  - tool: mcp://npx/@modelcontextprotocol/server-filesystem
    grants:
      - principal: group:engineering
        access: read
      - principal: serviceaccount:digest-bot
        access: write
        tools: [write_file]
mcp_credentials:
  mcp://notes.example.com/mcp:
    serviceaccount:digest-bot:
      type: bearer
    user:alice:
      type: api_key
      header: X-Api-Key
authorization:
  max_call_depth: 4
  approval_required_for: [destructive, network]
`

func TestParseProjectConfig(t *testing.T) {
	var l diag.List
	p := ParseProjectConfig("lush.yaml", []byte(goodProject), &l)
	if got := render(&l); got != "" {
		t.Fatalf("diagnostics:\n%s", got)
	}
	if p.Name.Value != "quickstart" || len(p.Models) != 2 || len(p.ServiceAccounts) != 2 || p.ServiceAccounts[1].Name.Value != "orchestrator" {
		t.Errorf("project = %+v", p)
	}
	if len(p.Servers) != 2 || len(p.Servers[0].Args) != 1 || p.Servers[0].Env[0].Name.Value != "LOG_LEVEL" || p.Servers[1].Transport.Value != "sse" {
		t.Errorf("servers = %+v", p.Servers)
	}
	if len(p.ToolClasses) != 4 || p.ToolClasses[2].Tool.Value != "*" || p.ToolClasses[3].Tool.Set() {
		t.Errorf("classes = %+v", p.ToolClasses)
	}
	if len(p.ToolGrants) != 1 || len(p.ToolGrants[0].Grants) != 2 || p.ToolGrants[0].Grants[1].Only[0].Value != "write_file" {
		t.Errorf("grants = %+v", p.ToolGrants)
	}
	if len(p.Credentials) != 2 || p.Credentials[1].Header.Value != "X-Api-Key" {
		t.Errorf("credentials = %+v", p.Credentials)
	}
	if p.Authorization.MaxCallDepth.Value != 4 || len(p.Authorization.ApprovalRequiredFor) != 2 {
		t.Errorf("authorization = %+v", p.Authorization)
	}
}

func TestParseProjectConfigErrors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"unknown section", "project: p\ntool_grant: []\n", `unknown field "tool_grant" in lush.yaml (did you mean "tool_grants"?)`},
		{"sa prefix", "project: p\nservice_accounts:\n  - name: serviceaccount:bot\n", "without the serviceaccount: prefix"},
		{"sa name", "project: p\nservice_accounts: [Bot]\n", `service account name "Bot" is not valid`},
		{"server not mcp", "project: p\nservers:\n  lush://a: {}\n", "lush://a is not an MCP server"},
		{"stdio url", "project: p\nservers:\n  mcp://npx/x:\n    url: http://x\n", "mcp://npx/x is a local stdio server"},
		{"remote args", "project: p\nservers:\n  mcp://h.example/x:\n    args: [a]\n", "is a remote server"},
		{"bad url", "project: p\nservers:\n  mcp://h.example/x:\n    url: ftp://x\n", `url "ftp://x" is not an HTTP URL`},
		{"bad timeout", "project: p\nservers:\n  mcp://h.example/x:\n    timeout: forever\n", "must be a positive duration"},
		{"class risk scalar", "project: p\ntool_classes:\n  tools/x: destructive\n", `"destructive" is a risk class, not an access level`},
		{"server class scalar", "project: p\ntool_classes:\n  mcp://npx/x: read\n", `write "*": read to classify every tool of the server`},
		{"cred type", "project: p\nmcp_credentials:\n  mcp://h.example/x:\n    user:a: {type: oath}\n", `type "oath" is not valid (did you mean "oauth"?`},
		{"cred header", "project: p\nmcp_credentials:\n  mcp://h.example/x:\n    user:a: {type: bearer, header: X-Key}\n", "header: applies to type api_key only"},
		{"cred env", "project: p\nmcp_credentials:\n  mcp://npx/x:\n    user:a: {type: env}\n", "type env needs the names of the variables it sets"},
		{"depth", "project: p\nauthorization:\n  max_call_depth: 0\n", "max_call_depth must be a whole number from 1 to 64"},
		{"grant missing", "project: p\ntool_grants:\n  - tool: lush://a\n    grants:\n      - principal: user:a\n", `grant is missing required field "access"`},
		{"no project", "models: []\n", `lush.yaml is missing required field "project"`},
		{"unknown role", "project: p\nroles:\n  auditor: [user:a]\n",
			`3:3 error unknown-role: unknown role "auditor" in roles (did you mean "audit"? (the roles are audit, approve, budget and tasks))`},
		{"unknown role without suggestion", "project: p\nroles:\n  admin: [user:a]\n",
			`3:3 error unknown-role: unknown role "admin" in roles (the roles are audit, approve, budget and tasks)`},
		{"role as a string", "project: p\nroles:\n  audit: group:auditors\n",
			`3:10 error wrong-type: roles.audit must be a list of principals, not a string (write a list of principals: audit: [group:auditors])`},
		{"role as a mapping", "project: p\nroles:\n  audit: {user:a: true}\n", `3:10 error wrong-type: roles.audit must be a list, not a mapping`},
		{"roles as a list", "project: p\nroles: [audit]\n", `2:8 error wrong-type: roles must be a mapping, not a list`},
		{"role principal not a string", "project: p\nroles:\n  audit: [1]\n", `3:11 error wrong-type: each item of roles.audit must be a string, not a number`},
		{"role twice", "project: p\nroles:\n  audit: [user:a]\n  audit: [user:b]\n", `4:3 error duplicate-key: "audit" is set twice in roles`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l diag.List
			ParseProjectConfig("lush.yaml", []byte(tt.src), &l)
			if got := render(&l); !strings.Contains(got, tt.want) {
				t.Errorf("diagnostics:\n%s\nwant containing %q", got, tt.want)
			}
		})
	}
}

func TestParseProjectRoles(t *testing.T) {
	src := "project: p\nroles:\n  audit: [group:auditors, user:carol]\n  approve:\n    - group:security\n  # nobody yet\n"
	var l diag.List
	p := ParseProjectConfig("lush.yaml", []byte(src), &l)
	if got := render(&l); got != "" {
		t.Fatalf("diagnostics:\n%s", got)
	}
	got := map[string][]string{}
	for _, r := range p.Roles {
		for _, pr := range r.Principals {
			got[r.Name.Value] = append(got[r.Name.Value], pr.Value)
		}
	}
	if fmt.Sprint(got) != "map[approve:[group:security] audit:[group:auditors user:carol]]" {
		t.Errorf("roles = %v", got)
	}
	if pos := p.Roles[0].Principals[1].Pos; pos != (diag.Pos{File: "lush.yaml", Line: 3, Col: 27}) {
		t.Errorf("position of user:carol = %v", pos)
	}
	if pos := p.Roles[1].Name.Pos; pos != (diag.Pos{File: "lush.yaml", Line: 4, Col: 3}) {
		t.Errorf("position of approve = %v", pos)
	}
}

func TestParseRateLimits(t *testing.T) {
	src := `project: p
rate_limits:
  - principal: group:contractors
    rate: 5/s
    burst: 10
  - tool: mcp://notes.example.com/mcp
    rate: 100/m
  - principal: user:carol
    rate: 30/h
  - tool: tools/clock
    rate: 2/s
`
	var l diag.List
	p := ParseProjectConfig("lush.yaml", []byte(src), &l)
	if got := render(&l); got != "" {
		t.Fatalf("diagnostics:\n%s", got)
	}
	var got []string
	for _, r := range p.RateLimits {
		got = append(got, fmt.Sprintf("%s%s %d per %s burst %d", r.Principal.Value, r.Tool.Value, r.Count, r.Per, r.EffectiveBurst()))
	}
	want := "[group:contractors 5 per 1s burst 10 mcp://notes.example.com/mcp 100 per 1m0s burst 2 user:carol 30 per 1h0m0s burst 1 tools/clock 2 per 1s burst 2]"
	if fmt.Sprint(got) != want {
		t.Errorf("rate limits = %v, want %s", got, want)
	}
	if pos := p.RateLimits[0].Rate.Pos; pos != (diag.Pos{File: "lush.yaml", Line: 4, Col: 11}) {
		t.Errorf("position of 5/s = %v", pos)
	}
	if r := p.RateLimits[0]; r.PerSecond() != 5 || r.DefaultBurst() != 5 {
		t.Errorf("per second %v, default burst %d", r.PerSecond(), r.DefaultBurst())
	}
}

func TestParseRateLimitErrors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"both", "project: p\nrate_limits:\n  - {principal: user:a, tool: tools/x, rate: 1/s}\n",
			"3:31 error conflicting-fields: a rate limit applies to a principal or to a tool, not both (write one entry per principal and one per tool)"},
		{"neither", "project: p\nrate_limits:\n  - {rate: 1/s}\n",
			"3:5 error missing-field: rate limit names neither a principal nor a tool (add principal: user:<id>, group:<name> or serviceaccount:<name>, or tool: <tool reference>)"},
		{"no rate", "project: p\nrate_limits:\n  - {principal: user:a}\n", `3:5 error missing-field: rate limit is missing required field "rate"`},
		{"rate without unit", "project: p\nrate_limits:\n  - {principal: user:a, rate: 5}\n",
			"3:31 error wrong-type: rate 5 has no unit (write it with a unit, such as 5/s or 5/m)"},
		{"bad unit", "project: p\nrate_limits:\n  - {principal: user:a, rate: 5/d}\n",
			`3:31 error invalid-value: rate "5/d" is not a whole number from 1 to 1000000 per s, m or h (write requests per second, minute or hour: 5/s, 100/m or 1000/h)`},
		{"zero rate", "project: p\nrate_limits:\n  - {principal: user:a, rate: 0/s}\n", `rate "0/s" is not a whole number from 1`},
		{"fraction", "project: p\nrate_limits:\n  - {principal: user:a, rate: 0.5/s}\n", `rate "0.5/s" is not a whole number from 1`},
		{"zero burst", "project: p\nrate_limits:\n  - {principal: user:a, rate: 1/s, burst: 0}\n",
			"3:43 error invalid-value: burst must be a whole number from 1 to 1000000"},
		{"burst not a number", "project: p\nrate_limits:\n  - {principal: user:a, rate: 1/s, burst: lots}\n", "burst must be a whole number, not a string"},
		{"bad principal", "project: p\nrate_limits:\n  - {principal: admin:root, rate: 1/s}\n",
			`3:17 error invalid-principal: rate_limits: principal "admin:root" has unknown kind "admin" (the kinds are user, group and serviceaccount)`},
		{"bad tool", "project: p\nrate_limits:\n  - {tool: ftp://x, rate: 1/s}\n", "3:12 error invalid-tool-ref"},
		{"unknown field", "project: p\nrate_limits:\n  - {principal: user:a, rate: 1/s, brust: 2}\n", `unknown field "brust" in rate limit (did you mean "burst"?)`},
		{"not a list", "project: p\nrate_limits: {principal: user:a}\n", "rate_limits must be a list, not a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l diag.List
			p := ParseProjectConfig("lush.yaml", []byte(tt.src), &l)
			if got := render(&l); !strings.Contains(got, tt.want) {
				t.Errorf("diagnostics:\n%s\nwant containing %q", got, tt.want)
			}
			if p != nil && len(p.RateLimits) != 0 && tt.name != "unknown field" {
				t.Errorf("invalid entry kept: %+v", p.RateLimits)
			}
		})
	}
}

func TestParseLocalTool(t *testing.T) {
	src := `description: Tells the time.
command: ./clock.sh
access: read
timeout: 5s
input_schema:
  type: object
  properties:
    zone: {type: string}
`
	var l diag.List
	tool := ParseLocalTool("tools/clock/tool.yaml", "tools/clock", "clock", []byte(src), &l)
	if got := render(&l); got != "" {
		t.Fatalf("diagnostics:\n%s", got)
	}
	if tool.Name.Value != "clock" || len(tool.Command) != 1 || tool.Class.Access.Value != "read" || tool.Class.Risk.Value != "read" {
		t.Errorf("tool = %+v", tool)
	}
	schema, ok := tool.InputSchema.(map[string]any)
	if !ok || schema["type"] != "object" {
		t.Errorf("schema = %#v", tool.InputSchema)
	}
}
