package compiler_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
)

const quickstart = "../examples/quickstart"

// copyTree copies src to dst, creating files in forward or reverse order, so tests can check
// that the order files were created in does not change the build.
func copyTree(t *testing.T, src, dst string, reverse bool) {
	t.Helper()
	type entry struct {
		rel  string
		mode fs.FileMode
		dir  bool
	}
	var entries []entry
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == ".lush" {
			return fs.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		entries = append(entries, entry{rel, info.Mode(), d.IsDir()})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries { // directories first, in any order
		if e.dir {
			if err := os.MkdirAll(filepath.Join(dst, e.rel), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if reverse {
		slices.Reverse(entries)
	}
	for _, e := range entries {
		if e.dir {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.rel), data, e.mode.Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

func build(t *testing.T, dir string, opts ...compiler.Option) *compiler.Result {
	t.Helper()
	res, err := compiler.Build(context.Background(), dir, append([]compiler.Option{compiler.Offline(true)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatalf("build of %s failed:\n%s", dir, render(res.Diagnostics))
	}
	return res
}

func render(ds []diag.Diagnostic) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.String())
	}
	return strings.Join(s, "\n")
}

func TestSameInputsSameHash(t *testing.T) {
	first := build(t, quickstart)
	again := build(t, quickstart)
	if first.Hash != again.Hash || string(first.ManifestJSON) != string(again.ManifestJSON) {
		t.Fatalf("two builds differ: %s vs %s", first.Hash, again.Hash)
	}
	if string(first.Bundle) != string(again.Bundle) {
		t.Error("two unsigned bundles of the same inputs differ byte for byte")
	}
	// A copy elsewhere, with files created in reverse order, builds the same hash.
	for _, reverse := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "somewhere", "else")
		copyTree(t, quickstart, dir, reverse)
		if got := build(t, dir); got.Hash != first.Hash {
			t.Errorf("copy (reverse=%v) built %s, want %s", reverse, got.Hash, first.Hash)
		}
	}
	// CRLF line endings (a Windows checkout) build the same hash too.
	dir := t.TempDir()
	copyTree(t, quickstart, dir, false)
	spec := filepath.Join(dir, "agents", "researcher", "spec.yaml")
	data, _ := os.ReadFile(spec)
	if err := os.WriteFile(spec, []byte(strings.ReplaceAll(string(data), "\n", "\r\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := build(t, dir); got.Hash != first.Hash {
		t.Errorf("CRLF copy built %s, want %s", got.Hash, first.Hash)
	}
	// The manifest is named by its content.
	if manifest.Hash(first.ManifestJSON) != first.Hash {
		t.Error("hash is not the SHA-256 of the manifest")
	}
	if strings.Contains(string(first.ManifestJSON), "/work/") || strings.Contains(string(first.ManifestJSON), os.TempDir()) {
		t.Error("the manifest contains an absolute path")
	}
}

func TestChangesChangeHash(t *testing.T) {
	base := build(t, quickstart).Hash
	edits := map[string]func(dir string){
		"spec":   func(dir string) { appendTo(t, filepath.Join(dir, "agents/researcher/spec.yaml"), "# a comment\n") },
		"policy": func(dir string) { appendTo(t, filepath.Join(dir, "policies/drafts.rego"), "\n# a comment\n") },
		"tool":   func(dir string) { appendTo(t, filepath.Join(dir, "tools/clock/clock.sh"), "# a comment\n") },
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, quickstart, dir, false)
			edit(dir)
			if got := build(t, dir).Hash; got == base {
				t.Errorf("editing the %s did not change the hash", name)
			}
		})
	}
	// Adding a policy test does not change what is deployed.
	dir := t.TempDir()
	copyTree(t, quickstart, dir, false)
	appendTo(t, filepath.Join(dir, "policies/drafts_test.rego"), "\ntest_extra if true\n")
	if got := build(t, dir).Hash; got != base {
		t.Error("editing a policy test changed the build hash")
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestManifestContent(t *testing.T) {
	res := build(t, quickstart)
	m := res.Manifest
	if m.Project != "quickstart" || len(m.Agents) != 4 || len(m.Loops) != 2 {
		t.Fatalf("manifest = %+v", m)
	}
	orch, ok := m.Agent("orchestrator")
	if !ok || !strings.HasPrefix(orch.Prompt, "You coordinate research") || !strings.Contains(orch.Prompt, "# Skills\n\n## concise-writing\n") {
		t.Errorf("orchestrator prompt = %q", orch.Prompt)
	}
	fs, ok := m.Tool("mcp://npx/@modelcontextprotocol/server-filesystem")
	if !ok || fs.Stdio == nil || fs.Stdio.Launcher != "npx" || !slices.Equal(fs.Stdio.Args, []string{"./data"}) || fs.TimeoutMS != 30000 {
		t.Errorf("filesystem tool = %+v", fs)
	}
	if c := fs.Classes["write_file"]; c.Access != "write" {
		t.Errorf("write_file class = %+v", c)
	}
	notes, _ := m.Tool("mcp://notes.example.com/mcp")
	if notes.Remote == nil || notes.Remote.URL != "http://127.0.0.1:8931/mcp" || notes.Remote.Transport != "streamable-http" {
		t.Errorf("notes tool = %+v", notes)
	}
	partner, _ := m.Tool("a2a://partner.example.com/agents/translator")
	if partner.A2A == nil || partner.A2A.URL != "https://partner.example.com/agents/translator" || partner.Classes[""].Access != "write" {
		t.Errorf("partner tool = %+v", partner)
	}
	clock, _ := m.Tool("tools/clock")
	if clock.Local == nil || clock.Local.Command[0] != "./clock.sh" || !strings.HasPrefix(clock.Local.Digest, "sha256:") || clock.TimeoutMS != 5000 {
		t.Errorf("clock tool = %+v", clock)
	}
	if len(m.Credentials) != 4 || m.Credentials[0].Tool != "a2a://partner.example.com/agents/translator" || m.Credentials[0].Type != "bearer" ||
		m.Credentials[1].Type != "bearer" || m.Credentials[3].Principal != "user:alice" || m.Credentials[3].Type != "oauth" || m.Credentials[3].Flow != "token_exchange" {
		t.Errorf("credentials = %+v; want the partner's bearer, the notes server's two bearer declarations and alice's oauth token_exchange", m.Credentials)
	}
	for _, in := range m.Inputs {
		if strings.HasSuffix(in.Path, "_test.rego") {
			t.Errorf("a test file is an input: %s", in.Path)
		}
	}
	// Decoding checks the hash.
	if _, err := manifest.Decode(res.ManifestJSON, res.Hash); err != nil {
		t.Error(err)
	}
	tampered := strings.Replace(string(res.ManifestJSON), "quickstart", "quickstarT", 1)
	if _, err := manifest.Decode([]byte(tampered), res.Hash); err == nil {
		t.Error("a tampered manifest decoded")
	}
}

func TestLoopSchedulingFields(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, quickstart, dir, false)
	writeFile(t, dir, "loops/ticker.yaml", `name: ticker
schedule: "@every 3m"
phase: 1m
concurrency: 2
overlap: queue
timeout: 90s
catch_up: 1h
agent: notifier
run_as: serviceaccount:digest-bot
instruction: Tick.
`)
	writeFile(t, dir, "loops/no-replay.yaml", `name: no-replay
schedule: "@hourly"
catch_up: 0s
agent: notifier
run_as: serviceaccount:digest-bot
instruction: Tock.
`)
	res := build(t, dir)
	m := res.Manifest
	find := func(name string) manifest.Loop {
		t.Helper()
		for _, l := range m.Loops {
			if l.Name == name {
				return l
			}
		}
		t.Fatalf("no loop %q in %+v", name, m.Loops)
		return manifest.Loop{}
	}

	ticker := find("ticker")
	if ticker.Concurrency != 2 || ticker.Overlap != "queue" || ticker.TimeoutMS != 90_000 || ticker.PhaseMS != 60_000 ||
		ticker.CatchUpMS == nil || *ticker.CatchUpMS != 3_600_000 {
		t.Errorf("ticker = %+v", ticker)
	}
	sched, err := ticker.Parsed()
	if err != nil {
		t.Fatal(err)
	}
	midnight := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	var got []time.Time
	for at := sched.Next(midnight); !at.After(midnight.Add(7 * time.Minute)); at = sched.Next(at) {
		got = append(got, at)
	}
	if len(got) != 3 || !got[0].Equal(midnight.Add(time.Minute)) || !got[1].Equal(midnight.Add(4*time.Minute)) || !got[2].Equal(midnight.Add(7*time.Minute)) {
		t.Errorf("ticker firings = %v", got)
	}

	// catch_up: 0s is kept, and distinct from an absent catch_up.
	if nr := find("no-replay"); nr.CatchUpMS == nil || *nr.CatchUpMS != 0 || nr.Concurrency != 0 || nr.Overlap != "" || nr.TimeoutMS != 0 || nr.PhaseMS != 0 {
		t.Errorf("no-replay = %+v", nr)
	}
	if v, ok := loopJSON(t, res.ManifestJSON, "no-replay")["catch_up_ms"]; !ok || v != 0.0 {
		t.Errorf("no-replay catch_up_ms in the manifest = %v, %v", v, ok)
	}

	// Loops that leave the fields out have the zero values, and the manifest omits them.
	hourly := find("hourly-notes")
	if hourly.Concurrency != 0 || hourly.Overlap != "" || hourly.TimeoutMS != 0 || hourly.CatchUpMS != nil || hourly.PhaseMS != 0 {
		t.Errorf("hourly-notes = %+v", hourly)
	}
	if s, err := hourly.Parsed(); err != nil || s.String() != "@hourly" {
		t.Errorf("hourly-notes Parsed() = %v, %v", s, err)
	}
	plain := build(t, quickstart).ManifestJSON
	for _, name := range []string{"hourly-notes", "weekday-digest"} {
		for _, key := range []string{"concurrency", "overlap", "timeout_ms", "catch_up_ms", "phase_ms"} {
			if _, ok := loopJSON(t, plain, name)[key]; ok {
				t.Errorf("loop %s has %q in the manifest, but its spec does not set it", name, key)
			}
		}
	}

	// A phase the schedule cannot take fails the build at the phase.
	bad := t.TempDir()
	copyTree(t, quickstart, bad, false)
	appendYAML(t, bad, "loops/hourly-notes.yaml", "phase: 1m\n")
	res, err = compiler.Build(context.Background(), bad, compiler.Offline(true))
	if err != nil {
		t.Fatal(err)
	}
	if got := render(res.Diagnostics); res.OK() || !strings.Contains(got, `phase applies only to @every schedules, not to "@hourly"`) {
		t.Errorf("build ok %v:\n%s", res.OK(), got)
	}
}

// loopJSON returns the named loop of an encoded manifest as a JSON object.
func loopJSON(t *testing.T, data []byte, name string) map[string]any {
	t.Helper()
	var m struct {
		Loops []map[string]any `json:"loops"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Loops {
		if l["name"] == name {
			return l
		}
	}
	t.Fatalf("no loop %q in the manifest", name)
	return nil
}

func TestBundleIsStandardOPA(t *testing.T) {
	res := build(t, quickstart)
	b, err := bundle.NewReader(strings.NewReader(string(res.Bundle))).Read()
	if err != nil {
		t.Fatal(err)
	}
	if b.Manifest.Revision != res.Hash || b.Manifest.Roots == nil || !slices.Equal(*b.Manifest.Roots, []string{"lush"}) {
		t.Errorf(".manifest = %+v", b.Manifest)
	}
	var paths []string
	for _, m := range b.Modules {
		paths = append(paths, m.Path)
	}
	if !slices.Contains(paths, "/policies/drafts.rego") || slices.ContainsFunc(paths, func(p string) bool { return strings.HasSuffix(p, "_test.rego") }) {
		t.Errorf("modules = %v", paths)
	}
	project := b.Data["lush"].(map[string]any)["project"].(map[string]any)
	if project["name"] != "quickstart" {
		t.Errorf("data.lush.project.name = %v", project["name"])
	}
}

func TestSignedBundle(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalECPrivateKey(key)
	priv := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	pubDER, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})

	res := build(t, quickstart, compiler.Sign(&compiler.SigningKey{Key: string(priv), Algorithm: "ES256", KeyID: "ci"}))
	keys := map[string]*bundle.KeyConfig{"ci": {Key: string(pub), Algorithm: "ES256"}}
	ctx := context.Background()
	if _, err := authz.FromBytes(ctx, res.Bundle, authz.VerifyWith(keys, "ci")); err != nil {
		t.Fatalf("signed bundle does not verify: %v", err)
	}
	// The signature covers the files: a bundle signed by another key is refused.
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherDER, _ := x509.MarshalPKIXPublicKey(&other.PublicKey)
	wrong := map[string]*bundle.KeyConfig{"ci": {Key: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: otherDER})), Algorithm: "ES256"}}
	if _, err := authz.FromBytes(ctx, res.Bundle, authz.VerifyWith(wrong, "ci")); err == nil {
		t.Error("a bundle verified against the wrong key")
	}
	// The signed build has the same manifest hash as the unsigned one.
	if plain := build(t, quickstart); plain.Hash != res.Hash {
		t.Error("signing changed the manifest hash")
	}
}

func TestProjectPolicyNamespace(t *testing.T) {
	tests := map[string]string{
		"package lush.authz\n\nallow := true\n":              "project policies must be in package lush.policies.<name>, not lush.authz",
		"package lush.project\n\nx := 1\n":                   "not lush.project",
		"package lush.policies.a.b\n\ndeny contains 1\n":     "not lush.policies.a.b",
		"package mycompany.rules\n\ndeny contains \"x\"\n":   "not mycompany.rules",
		"package lush.policies.fn\n\ndeny(x) := true if x\n": "deny is written as a function",
	}
	for src, want := range tests {
		dir := t.TempDir()
		copyTree(t, quickstart, dir, false)
		if err := os.WriteFile(filepath.Join(dir, "policies", "extra.rego"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
		if err != nil {
			t.Fatal(err)
		}
		if res.OK() || !strings.Contains(render(res.Diagnostics), want) {
			t.Errorf("%q: diagnostics:\n%s\nwant %q", src, render(res.Diagnostics), want)
		}
	}
}

// TestCheckedProblems covers checks whose examples/errors golden does not show them.
func TestCheckedProblems(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(dir string)
		code  string
		error bool
	}{
		{"duplicate allowlist entry", func(dir string) {
			appendYAML(t, dir, "agents/notifier/spec.yaml", "tools:\n  - name: tools/clock\n    access: read\n  - name: tools/clock\n    access: read\n")
		}, "duplicate-tool", true},
		{"empty acl", func(dir string) {
			writeFile(t, dir, "agents/lonely/spec.yaml", "name: lonely\nmodel: gemini-2.5-flash\ndescription: Alone.\n")
		}, "empty-acl", false},
		{"unused local tool", func(dir string) {
			writeFile(t, dir, "tools/spare/tool.yaml", "description: spare\ncommand: ./run\n")
			writeFile(t, dir, "tools/spare/run", "#!/bin/sh\n")
			os.Chmod(filepath.Join(dir, "tools/spare/run"), 0o755)
		}, "unused-tool", false},
		{"builtin access", func(dir string) {
			appendYAML(t, dir, "agents/notifier/spec.yaml", "tools:\n  - name: builtin/file_write\n    access: write\n    paths: [data]\n")
			appendYAML(t, dir, "lush.yaml", "tool_classes:\n  builtin/file_write: read\n")
		}, "builtin-class", true},
		{"credential type", func(dir string) {
			appendYAML(t, dir, "lush.yaml", "mcp_credentials:\n  mcp://npx/@modelcontextprotocol/server-filesystem:\n    user:alice: {type: bearer}\n")
		}, "credential-type", true},
		{"models list", func(dir string) {
			appendYAML(t, dir, "lush.yaml", "models: [gemini-2.5-flash]\n")
		}, "unknown-model", true}, // notifier uses gemini-2.5-flash-lite
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, quickstart, dir, false)
			tt.edit(dir)
			res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
			if err != nil {
				t.Fatal(err)
			}
			var found *diag.Diagnostic
			for i, d := range res.Diagnostics {
				if d.Code == tt.code {
					found = &res.Diagnostics[i]
				}
			}
			if found == nil {
				t.Fatalf("no %s diagnostic:\n%s", tt.code, render(res.Diagnostics))
			}
			if (found.Severity == diag.Error) != tt.error || res.OK() == tt.error {
				t.Errorf("%s: severity %s, build ok %v", tt.code, found.Severity, res.OK())
			}
		})
	}
}

func writeFile(t *testing.T, dir, rel, s string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// appendYAML merges top-level keys into a YAML file by replacing an existing key's block or
// appending it.
func appendYAML(t *testing.T, dir, rel, s string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	key := s[:strings.Index(s, ":")+1]
	lines := strings.Split(string(data), "\n")
	var out []string
	skipping := false
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, key):
			skipping = true
		case skipping && (strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t")):
		default:
			skipping = false
			out = append(out, l)
		}
	}
	if err := os.WriteFile(p, []byte(strings.Join(out, "\n")+"\n"+s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFileToolPaths checks that the manifest carries a file tool's paths: normalized, sorted
// and unique, and that other tools carry none (so their manifests keep their hash).
func TestFileToolPaths(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, quickstart, dir, false)
	appendYAML(t, dir, "agents/notifier/spec.yaml", "tools:\n  - server: mcp://notes.example.com/mcp\n    access: write\n  - name: tools/clock\n    access: read\n"+
		"  - name: builtin/file_read\n    access: read\n    paths: [./docs/public/, data, data/., \"docs//public\", .]\n"+
		"  - name: builtin/file_write\n    access: write\n    paths: [drafts/]\n")
	res := build(t, dir)
	a, ok := res.Manifest.Agent("notifier")
	if !ok {
		t.Fatal("no agent notifier")
	}
	got := map[string][]string{}
	for _, at := range a.Tools {
		got[at.Ref] = at.Paths
	}
	want := map[string][]string{
		"builtin/file_read":           {".", "data", "docs/public"},
		"builtin/file_write":          {"drafts"},
		"tools/clock":                 nil,
		"mcp://notes.example.com/mcp": nil,
	}
	for ref, w := range want {
		if g, ok := got[ref]; !ok || !slices.Equal(g, w) {
			t.Errorf("%s paths = %q, want %q", ref, g, w)
		}
	}
	if n := strings.Count(string(res.ManifestJSON), `"paths":`); n != 2 {
		t.Errorf("manifest JSON paths:\n%s", res.ManifestJSON)
	}
	if _, err := manifest.Decode(res.ManifestJSON, res.Hash); err != nil {
		t.Error(err)
	}
}

// An allowlisted lush:// agent that no grant lets anyone call is a warning at each allowlist entry
// that names it (every call would be denied); the quickstart, which grants lush://researcher, has
// none.
func TestUngrantedAgentCall(t *testing.T) {
	researcherGrant := "  - tool: lush://researcher\n    grants:\n      - principal: group:engineering\n        access: read\n" +
		"      - principal: serviceaccount:digest-bot\n        access: read\n"
	tests := []struct {
		name    string
		grant   string // what replaces the quickstart's grant of lush://researcher
		warning bool
	}{
		{"granted", researcherGrant, false},
		{"no grant", "", true},
		{"a grant entry with no grants", "  - tool: lush://researcher\n    grants: []\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, quickstart, dir, false)
			p := filepath.Join(dir, "lush.yaml")
			data, err := os.ReadFile(p)
			if err != nil || !strings.Contains(string(data), researcherGrant) {
				t.Fatalf("the quickstart's lush.yaml no longer grants lush://researcher as this test expects (%v)", err)
			}
			writeFile(t, dir, "lush.yaml", strings.Replace(string(data), researcherGrant, tt.grant, 1))
			res := build(t, dir)
			var got []string
			for _, d := range res.Diagnostics {
				if d.Code == "ungranted-agent" {
					got = append(got, d.String())
				}
			}
			want := []string(nil)
			if tt.warning {
				want = []string{"agents/orchestrator/spec.yaml:10:13: warning: no tool_grants entry grants lush://researcher to anyone: every call orchestrator makes to it is denied" +
					" (grant it in lush.yaml: tool_grants: [{tool: lush://researcher, grants: [{principal: …, access: read}]}])"}
			}
			if !slices.Equal(got, want) {
				t.Errorf("ungranted-agent diagnostics:\n%q\nwant\n%q", got, want)
			}
		})
	}
}
