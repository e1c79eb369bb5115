package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// answering is an ext_authz server that allows requests whose path ends in /allow (adding a
// credential) and denies the rest, as Lush answers them.
type answering struct {
	authv3.UnimplementedAuthorizationServer
}

func (answering) Check(_ context.Context, r *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	md, _ := structpb.NewStruct(map[string]any{"decision_id": "d-1", "outcome": "allow"})
	hdr := func(k, v string) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}}
	}
	if strings.HasSuffix(r.GetAttributes().GetRequest().GetHttp().GetPath(), "/allow") {
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(code.Code_OK)}, DynamicMetadata: md,
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
				Headers:         []*corev3.HeaderValueOption{hdr("x-lush-decision-id", "d-1"), hdr("authorization", "Bearer upstream-secret-token")},
				HeadersToRemove: []string{"x-api-key"}}}}, nil
	}
	md, _ = structpb.NewStruct(map[string]any{"decision_id": "d-2", "outcome": "deny"})
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(code.Code_PERMISSION_DENIED)}, DynamicMetadata: md,
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden},
			Body:   `{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Lush denied this call"}}`}}}, nil
}

func TestMeshCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	authv3.RegisterAuthorizationServer(srv, answering{})
	go srv.Serve(ln)
	defer srv.Stop()
	addr := ln.Addr().String()
	dir := t.TempDir()
	write := func(name, path string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(`{"attributes":{"request":{"http":{"method":"POST","path":"`+path+`"}}}}`), 0o644)
		return p
	}
	allow, deny := write("allow.json", "/agents/a/tools/x/allow"), write("deny.json", "/agents/a/tools/x/deny")

	r := lushctl(t, "", "mesh", "check", "--ext-authz", addr, allow, deny)
	if r.code != 0 || !strings.Contains(r.stdout, "allow.json: ALLOW, forwarded to the upstream (decision d-1)") ||
		!strings.Contains(r.stdout, "+ authorization: (hidden, 28 bytes)") || !strings.Contains(r.stdout, "- x-api-key") ||
		!strings.Contains(r.stdout, "deny.json: DENY, answered at the sidecar with 403 (decision d-2)") {
		t.Errorf("text output (%d):\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "upstream-secret-token") {
		t.Error("a credential header's value is shown")
	}
	if r := lushctl(t, "", "mesh", "check", "--ext-authz", addr, "--fail-on-deny", allow, deny); r.code != exitFailed {
		t.Errorf("--fail-on-deny with a denial: exit %d", r.code)
	}
	if r := lushctl(t, "", "mesh", "check", "--ext-authz", addr, "--fail-on-deny", allow); r.code != 0 {
		t.Errorf("--fail-on-deny, all allowed: exit %d", r.code)
	}
	r = lushctl(t, "", "mesh", "check", "--ext-authz", addr, "-o", "json", deny)
	var answers []checkAnswer
	if err := json.Unmarshal([]byte(r.stdout), &answers); err != nil || len(answers) != 1 || answers[0].Status != 403 || answers[0].Outcome != "deny" {
		t.Errorf("json output: %v %s", err, r.stdout)
	}
	stdin, _ := os.ReadFile(allow)
	if r := lushctl(t, string(stdin), "mesh", "check", "--ext-authz", addr, "-"); r.code != 0 || !strings.Contains(r.stdout, "-: ALLOW") {
		t.Errorf("from stdin: %d %s %s", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{filepath.Join(dir, "missing.json")}, exitUsage, "read "},
		{[]string{write("bad.json", `"`)}, exitUsage, "is not a CheckRequest in protobuf JSON"},
		{[]string{"-o", "yaml", allow}, exitUsage, "--output"},
	} {
		r := lushctl(t, "", append([]string{"mesh", "check", "--ext-authz", addr}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d %q, want %d %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closed.Close()
	if r := lushctl(t, "", "mesh", "check", "--ext-authz", closed.Addr().String(), "--timeout", "300ms", allow); r.code != exitRuntime {
		t.Errorf("no server: exit %d %s", r.code, r.stderr)
	}
}

func TestMeshXDSAndBootstrap(t *testing.T) {
	dir := quickstartCopy(t)
	if r := lushctl(t, "", "mesh", "xds", "--print", dir); r.code != exitRuntime || !strings.Contains(r.stderr, "nothing is deployed") {
		t.Errorf("nothing deployed: %d %s", r.code, r.stderr)
	}
	r := lushctl(t, "", "build", "-q", "--offline", dir)
	hash := strings.TrimSpace(r.stdout)
	if r.code != 0 || len(hash) != 64 {
		t.Fatalf("build: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := lushctl(t, "", "deploy", hash, dir); r.code != 0 {
		t.Fatalf("deploy: %s", r.stderr)
	}
	r = lushctl(t, "", "mesh", "xds", "--print", "--ext-authz", "unix:///run/lush/ext_authz.sock", dir)
	// One JSON document (jq reads it), the resources under their type.
	var doc map[string][]struct {
		Name string `json:"name"`
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&doc); err != nil || dec.More() {
		t.Errorf("mesh xds --print is not one JSON document (%v):\n%s", err, r.stdout)
	}
	for _, typ := range []string{"listeners", "routes", "clusters"} {
		if len(doc[typ]) == 0 || doc[typ][0].Name == "" {
			t.Errorf("mesh xds --print: no named %s in %v", typ, doc)
		}
	}
	for _, want := range []string{`"name": "lush_mcp"`, `"path": "/agents/researcher/tools/notes/mcp"`, `"lush.tool": "mcp://notes.example.com/mcp"`,
		`"prefix": "/gateway/agents/researcher/"`, `"path": "/run/lush/ext_authz.sock"`} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("mesh xds --print: %d, no %s in\n%s%s", r.code, want, r.stdout, r.stderr)
			break
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mesh", "xds", "--print", "--ext-authz", "9191", dir}, "cluster lush_ext_authz"},
		{[]string{"mesh", "xds", "--print", "--tls-cert", "a.pem", dir}, "needs all of --tls-cert, --tls-key and --tls-ca"},
		{[]string{"mesh", "xds", "--print", "--build", "0000", dir}, "--build"},
		{[]string{"mesh", "bootstrap", "--admin", "nowhere"}, "--admin"},
	} {
		if r := lushctl(t, "", tc.args...); r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %d %q, want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	out := filepath.Join(t.TempDir(), "envoy.yaml")
	if r := lushctl(t, "", "mesh", "bootstrap", "--xds", "xds.internal:18000", "--node-id", "notes-sidecar", "-o", out); r.code != 0 {
		t.Fatalf("bootstrap: %s", r.stderr)
	}
	if b, _ := os.ReadFile(out); !strings.Contains(string(b), "id: notes-sidecar") || !strings.Contains(string(b), "address: xds.internal") {
		t.Errorf("bootstrap:\n%s", b)
	}
}
