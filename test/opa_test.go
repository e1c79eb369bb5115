// Package test holds end-to-end tests that start several processes: lushctl, the real opa CLI,
// MCP servers. Each test starts what it needs on loopback and stops it before it returns.
package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/bundlesource"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
)

// opaBinary finds the real opa CLI that make test installs into .tools/bin.
func opaBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("opa"); err == nil {
		return p
	}
	if p, _ := filepath.Abs("../.tools/bin/opa"); fileExists(p) {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("the opa CLI is not installed in CI: run the tests with make test")
	}
	t.Skip("opa CLI not installed (make opa-tool)")
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

var decisionInputs = []authz.Input{
	{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}, Agent: "orchestrator", Chain: []string{"orchestrator"}, Depth: 1,
		Tool: &authz.Tool{Ref: "mcp://npx/@modelcontextprotocol/server-filesystem", Name: "write_file"}, Arguments: map[string]any{"path": "drafts/plan.md"}},
	{Action: "tools/call", Principal: authz.Principal{ID: "serviceaccount:digest-bot", Groups: []string{}}, Agent: "orchestrator", Chain: []string{"orchestrator"}, Depth: 1,
		Tool: &authz.Tool{Ref: "mcp://npx/@modelcontextprotocol/server-filesystem", Name: "write_file"}, Arguments: map[string]any{"path": "drafts/plan.md"}},
	{Action: "tools/call", Principal: authz.Principal{ID: "user:alice", Groups: []string{}}, Agent: "orchestrator", LiveWrites: true,
		Tool: &authz.Tool{Ref: "mcp://npx/@modelcontextprotocol/server-filesystem", Name: "write_file"}, Arguments: map[string]any{"path": "/etc/passwd"}},
	{Action: "loop/read", Principal: authz.Principal{ID: "user:zed", Groups: []string{}}, Loop: "weekday-digest"},
	// The policy's fast branches: an allowed read (fast_read), denied writes (fast_deny) with and
	// without a project denial, and a caller with neither execute nor a grant.
	{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}, Agent: "researcher", Chain: []string{"researcher"}, Depth: 1,
		Tool: &authz.Tool{Ref: "mcp://npx/@modelcontextprotocol/server-filesystem", Name: "read_text_file"}, Arguments: map[string]any{"path": "data/q3.md"}},
	{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}, Agent: "researcher", Chain: []string{"researcher"}, Depth: 1,
		Tool: &authz.Tool{Ref: "mcp://npx/@modelcontextprotocol/server-filesystem", Name: "write_file"}, Arguments: map[string]any{"path": "data/q3.md"}},
	{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}, Agent: "orchestrator", Chain: []string{"orchestrator"}, Depth: 1,
		Tool: &authz.Tool{Ref: "mcp://npx/@modelcontextprotocol/server-filesystem", Name: "create_directory"}, Arguments: map[string]any{"path": "drafts/x"}},
	{Action: "tools/call", Principal: authz.Principal{ID: "user:zed", Groups: []string{}}, Agent: "researcher", Chain: []string{"researcher"}, Depth: 1,
		Tool: &authz.Tool{Ref: "tools/clock", Name: ""}},
	// Reads the index (data.lush.index) admits through a group, a service account and "other"
	// names, and one it does not (no grant for the caller).
	{Action: "tools/call", Principal: authz.Principal{ID: "serviceaccount:digest-bot", Groups: []string{}}, Agent: "orchestrator", Chain: []string{"orchestrator"}, Depth: 1,
		Tool: &authz.Tool{Ref: "mcp://npx/@modelcontextprotocol/server-filesystem", Name: "list_directory"}, Arguments: map[string]any{"path": "data"}},
	{Action: "tools/call", Principal: authz.Principal{ID: "user:bob", Groups: []string{"group:engineering"}}, Agent: "researcher", Chain: []string{"researcher"}, Depth: 1,
		Tool: &authz.Tool{Ref: "tools/clock", Name: "now"}},
	{Action: "tools/call", Principal: authz.Principal{ID: "user:zed", Groups: []string{"group:contractors"}}, Agent: "researcher", Chain: []string{"researcher"}, Depth: 1,
		Tool: &authz.Tool{Ref: "mcp://npx/@modelcontextprotocol/server-filesystem", Name: "read_text_file"}, Arguments: map[string]any{"path": "data/q3.md"}},
}

// buildQuickstart builds examples/quickstart into a temporary directory and returns the bundle
// path and Lush's own engine over it.
func buildQuickstart(t *testing.T, opts ...compiler.Option) (string, *compiler.Result) {
	t.Helper()
	res, err := compiler.Build(context.Background(), "../examples/quickstart", append([]compiler.Option{compiler.Offline(true)}, opts...)...)
	if err != nil || !res.OK() {
		t.Fatalf("build: %v %v", err, res)
	}
	path := filepath.Join(t.TempDir(), res.Hash+".tar.gz")
	if err := os.WriteFile(path, res.Bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, res
}

// lushDecision is what Lush's engine decides, as the policy returns it (without engine fields).
func lushDecision(t *testing.T, e *authz.Engine, in authz.Input) map[string]any {
	t.Helper()
	d := e.Decide(context.Background(), in)
	d.Revision, d.Error = "", ""
	data, _ := json.Marshal(d)
	var m map[string]any
	json.Unmarshal(data, &m)
	delete(m, "revision")
	return m
}

// TestOPAEvalLoadsBundle: `opa eval -b` over the built bundle gives the decisions Lush gives,
// and so it does over the bundle without its index (data.lush.index, the fast path's lookups).
func TestOPAEvalLoadsBundle(t *testing.T) {
	opa := opaBinary(t)
	path, res := buildQuickstart(t)
	eng, err := authz.FromBytes(context.Background(), res.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{path, withoutIndex(t, res.Bundle)} {
		evalMatchesLush(t, opa, path, eng)
	}
}

// withoutIndex writes the bundle without data.lush.index and returns its path.
func withoutIndex(t *testing.T, raw []byte) string {
	t.Helper()
	b, err := bundle.NewReader(bytes.NewReader(raw)).WithSkipBundleVerification(true).Read()
	if err != nil {
		t.Fatal(err)
	}
	delete(b.Data["lush"].(map[string]any), "index")
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatal(err)
	}
	noIndex := filepath.Join(t.TempDir(), "no-index.tar.gz")
	if err := os.WriteFile(noIndex, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return noIndex
}

// TestOPAEvalOddInputs: plain `opa eval` over the built bundle decides an allowed read (which
// the fast path, fast_read, decides) with one field it reads removed or of another type or form
// as it does over the bundle without its index (where the fast path never applies).
func TestOPAEvalOddInputs(t *testing.T) {
	opa := opaBinary(t)
	path, res := buildQuickstart(t)
	const absent = "<absent>"
	values := []any{absent, nil, 0, 1.5, "", "x", true, false, []any{}, []any{"x"}, []any{1}, map[string]any{},
		"group:", "group:engineering", "user:", "user:bob", "read", "write", "tools/call", "researcher", 99,
		// Approvals, rate limits and budgets of each outcome.
		map[string]any{"status": "approved", "id": "a1", "approved_by": "user:carol"}, map[string]any{"status": "approved"},
		map[string]any{"exceeded": false}, map[string]any{"exceeded": true}, map[string]any{"exhausted": false}, map[string]any{"exhausted": true}}
	base := func() map[string]any {
		return map[string]any{"action": "tools/call", "agent": "researcher", "chain": []any{"researcher"}, "depth": 1, "live_writes": false,
			"principal": map[string]any{"id": "user:bob", "groups": []any{"group:engineering"}},
			"tool":      map[string]any{"ref": "mcp://npx/@modelcontextprotocol/server-filesystem", "name": "read_text_file"},
			"arguments": map[string]any{"path": "data/q3.md"}}
	}
	set := func(outer, field string, v any) map[string]any {
		in := base()
		m := in
		if outer != "" {
			m = in[outer].(map[string]any)
		}
		if v == absent {
			delete(m, field)
		} else {
			m[field] = v
		}
		return in
	}
	cases := []any{base()}
	for _, f := range [][2]string{{"", "action"}, {"", "agent"}, {"", "principal"}, {"principal", "id"}, {"principal", "groups"},
		{"", "tool"}, {"tool", "ref"}, {"tool", "name"}, {"tool", "access"}, {"tool", "risk"}, {"tool", "arguments_valid"},
		{"tool", "refusal"}, {"", "chain"}, {"", "depth"}, {"", "live_writes"}, {"", "rate_limit"}, {"", "budget"}, {"", "approval"}} {
		for _, v := range values {
			cases = append(cases, set(f[0], f[1], v))
		}
	}
	for _, v := range values[1:] {
		cases = append(cases, set("principal", "groups", []any{"group:engineering", v}), set("", "chain", []any{v}))
	}
	cases = append(cases, set("", "depth", 6), set("", "chain", []any{"a", "b", "c", "d", "e", "f"}))
	inputFile := filepath.Join(t.TempDir(), "cases.json")
	data, _ := json.Marshal(map[string]any{"cases": cases})
	os.WriteFile(inputFile, data, 0o644)
	decide := func(path string) []any {
		out, err := exec.Command(opa, "eval", "--bundle", path, "--input", inputFile, "--format", "json",
			"[d | some x in input.cases; d := data.lush.authz.decision with input as x]").CombinedOutput()
		if err != nil {
			t.Fatalf("opa eval: %v\n%s", err, out)
		}
		var result struct {
			Result []struct {
				Expressions []struct {
					Value []any `json:"value"`
				} `json:"expressions"`
			} `json:"result"`
		}
		if err := json.Unmarshal(out, &result); err != nil || len(result.Result) != 1 || len(result.Result[0].Expressions[0].Value) != len(cases) {
			t.Fatalf("opa eval output: %v\n%.2000s", err, out)
		}
		return result.Result[0].Expressions[0].Value
	}
	got, want := decide(path), decide(withoutIndex(t, res.Bundle))
	if got[0].(map[string]any)["outcome"] != "allow" {
		t.Fatalf("the unchanged read is not allowed: %v", got[0])
	}
	allowed := 0
	for i := range cases {
		if !reflect.DeepEqual(got[i], want[i]) {
			c, _ := json.Marshal(cases[i])
			t.Errorf("input %s:\nwith the index %v\nwithout it     %v", c, got[i], want[i])
		}
		if got[i].(map[string]any)["outcome"] == "allow" {
			allowed++
		}
	}
	t.Logf("%d inputs, %d allowed", len(cases), allowed)
}

func evalMatchesLush(t *testing.T, opa, path string, eng *authz.Engine) {
	t.Helper()
	for i, in := range decisionInputs {
		inputFile := filepath.Join(t.TempDir(), "input.json")
		data, _ := json.Marshal(in)
		os.WriteFile(inputFile, data, 0o644)
		out, err := exec.Command(opa, "eval", "--bundle", path, "--input", inputFile, "--format", "json", "data.lush.authz.decision").CombinedOutput()
		if err != nil {
			t.Fatalf("opa eval: %v\n%s", err, out)
		}
		var result struct {
			Result []struct {
				Expressions []struct {
					Value map[string]any `json:"value"`
				} `json:"expressions"`
			} `json:"result"`
		}
		if err := json.Unmarshal(out, &result); err != nil || len(result.Result) != 1 {
			t.Fatalf("opa eval output: %v\n%s", err, out)
		}
		got := result.Result[0].Expressions[0].Value
		if want := lushDecision(t, eng, in); !reflect.DeepEqual(got, want) {
			t.Errorf("%s, input %d: opa eval = %v\nlush = %v", filepath.Base(path), i, got, want)
		}
	}
}

// TestOPARunServesSignedBundle: `opa run -s -b` loads the signed bundle, verifies it with the
// public key, and answers the decision over its REST API; a wrong key is refused.
func TestOPARunServesSignedBundle(t *testing.T) {
	opa := opaBinary(t)
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pubDER, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	dir := t.TempDir()
	pub := filepath.Join(dir, "pub.pem")
	os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)

	path, res := buildQuickstart(t, compiler.Sign(&compiler.SigningKey{Key: string(priv), Algorithm: "RS256", KeyID: "ci"}))
	eng, err := authz.FromBytes(context.Background(), res.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, opa, "run", "--server", "--addr", addr, "--log-level", "error",
		"--verification-key", pub, "--verification-key-id", "ci", "--bundle", path)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	waitHTTP(t, "http://"+addr+"/health?bundles", &logs)

	for i, in := range decisionInputs {
		body, _ := json.Marshal(map[string]any{"input": in})
		resp, err := http.Post("http://"+addr+"/v1/data/lush/authz/decision", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Result map[string]any `json:"result"`
		}
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if want := lushDecision(t, eng, in); !reflect.DeepEqual(out.Result, want) {
			t.Errorf("input %d: opa run = %v\nlush = %v", i, out.Result, want)
		}
	}

	// A different public key: opa refuses to activate the bundle.
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	otherDER, _ := x509.MarshalPKIXPublicKey(&other.PublicKey)
	wrong := filepath.Join(dir, "wrong.pem")
	os.WriteFile(wrong, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: otherDER}), 0o644)
	out, err := exec.Command(opa, "eval", "--bundle", path, "--verification-key", wrong, "--verification-key-id", "ci", "data.lush.authz.decision").CombinedOutput()
	if err == nil {
		t.Errorf("opa accepted a bundle signed by another key:\n%s", out)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitHTTP(t *testing.T, url string, logs fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not become ready:\n%s", url, logs.String())
}

// TestOPAEvalReadsTheManifest: the manifest travels in the bundle as data.lush.build.manifest,
// and the real opa reads it back byte for byte: its SHA-256 is the bundle's revision.
func TestOPAEvalReadsTheManifest(t *testing.T) {
	opa := opaBinary(t)
	path, res := buildQuickstart(t)
	out, err := exec.Command(opa, "eval", "--bundle", path, "--format", "json", "data.lush.build.manifest").CombinedOutput()
	if err != nil {
		t.Fatalf("opa eval: %v\n%s", err, out)
	}
	var doc struct {
		Result []struct {
			Expressions []struct {
				Value string `json:"value"`
			} `json:"expressions"`
		} `json:"result"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || len(doc.Result) != 1 || len(doc.Result[0].Expressions) != 1 {
		t.Fatalf("opa eval output: %v\n%s", err, out)
	}
	text := doc.Result[0].Expressions[0].Value
	if got := manifest.Hash([]byte(text)); got != res.Hash || text != string(res.ManifestJSON) {
		t.Errorf("the manifest opa reads hashes to %s, want the revision %s", got, res.Hash)
	}
}

// TestOPARunPullsOCIBundle: the real `opa run --server`, configured with an OCI service (OPA's
// services[].type: oci, with a bearer token) pointing at a registry on loopback, pulls the bundle
// Lush pushed there (bundlesource.PublishOCI, what lushctl deploy --to oci:// runs), activates
// it, and decides as Lush does; the manifest it reads hashes to the build's revision.
func TestOPARunPullsOCIBundle(t *testing.T) {
	opa := opaBinary(t)
	_, res := buildQuickstart(t)
	eng, err := authz.FromBytes(context.Background(), res.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+base64.StdEncoding.EncodeToString([]byte("oci-token")) {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"no"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("oci-token\n"), 0o600)
	if _, err := bundlesource.PublishOCI(context.Background(), "oci+http://"+host+"/lush/quickstart:v1", res.Bundle, res.Hash, token); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "opa.yaml")
	os.WriteFile(config, fmt.Appendf(nil, `services:
  registry:
    url: http://%[1]s
    type: oci
    credentials:
      bearer:
        token_path: %[2]s
bundles:
  lush:
    service: registry
    resource: %[1]s/lush/quickstart:v1
    polling: {min_delay_seconds: 1, max_delay_seconds: 2}
`, host, token), 0o644)

	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, opa, "run", "--server", "--addr", addr, "--log-level", "error", "--config-file", config)
	cmd.Env = append(os.Environ(), "TMPDIR="+dir) // OPA's OCI downloader keeps its store there
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	waitHTTP(t, "http://"+addr+"/health?bundles", &logs) // 200 once the bundle is activated

	resp, err := http.Get("http://" + addr + "/v1/data/lush/build/manifest")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Result string `json:"result"`
	}
	json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if got := manifest.Hash([]byte(doc.Result)); got != res.Hash {
		t.Fatalf("the manifest opa pulled hashes to %s, want the revision %s\n%s", got, res.Hash, logs.String())
	}
	for i, in := range decisionInputs {
		body, _ := json.Marshal(map[string]any{"input": in})
		resp, err := http.Post("http://"+addr+"/v1/data/lush/authz/decision", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Result map[string]any `json:"result"`
		}
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if want := lushDecision(t, eng, in); !reflect.DeepEqual(out.Result, want) {
			t.Errorf("input %d: opa run (OCI) = %v\nlush = %v", i, out.Result, want)
		}
	}
}
