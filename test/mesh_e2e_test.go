package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	adsclient "github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/test/mcpserver"
)

// These tests put Lush's ext_authz server (in `lushctl serve`) in front of a real MCP server, the
// way an Envoy sidecar does. No Envoy binary can be installed here, so sidecar() stands in for
// Envoy's HTTP ext_authz filter and router: it sends the CheckRequest Envoy sends (headers, raw
// body, source address), then either forwards the request with the headers the answer adds and
// removes, or answers with the answer's status, headers and body.

const (
	meshAlice = "mesh-alice-key-0123456789"
	meshBob   = "mesh-bob-key-0123456789"
)

func meshProject(t *testing.T, upstream string) string {
	return writeProject(t, map[string]string{
		"lush.yaml": `project: mesh-e2e
servers:
  mcp://notes.internal/mcp:
    url: ` + upstream + `
tool_classes:
  mcp://notes.internal/mcp:
    echo: read
    write_note: {access: write, risk: write}
tool_grants:
  - tool: mcp://notes.internal/mcp
    grants:
      - {principal: group:eng, access: read}
      - {principal: user:alice, access: write, tools: [write_note]}
`,
		"agents/assistant/spec.yaml": `name: assistant
model: gemini-2.5-flash
description: Takes notes.
tools:
  - server: mcp://notes.internal/mcp
    access: write
acl:
  - principal: group:eng
    role: execute
  - principal: user:bob
    role: execute
`,
		"gateway.yaml": "auth:\n  api_keys:\n" +
			"    - {name: alice, sha256: " + sha256hex(meshAlice) + ", principal: user:alice, groups: [group:eng]}\n" +
			"    - {name: bob, sha256: " + sha256hex(meshBob) + ", principal: user:bob}\n",
		"scripts/assistant.yaml": "turns: []\n",
	})
}

// sidecar serves what an Envoy sidecar in front of upstream does with Lush as its ext_authz
// service, on the assistant's route to the notes server. checks counts the CheckRequests sent.
func sidecar(t *testing.T, authz authv3.AuthorizationClient, upstream string, checks *int) string {
	t.Helper()
	return sidecarRoute(t, authz, upstream, "/agents/assistant/tools/notes/mcp", func(*http.Request) bool { return true }, checks)
}

// sidecarRoute is sidecar on the route path, sending the request body with a CheckRequest when
// withBody says the Envoy route the request takes asks for it, and nothing of it otherwise; the
// upstream gets the body either way.
func sidecarRoute(t *testing.T, authz authv3.AuthorizationClient, upstream, path string, withBody func(*http.Request) bool, checks *int) string {
	t.Helper()
	target, _ := url.Parse(upstream)
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.URL.Path = target.Path
	}}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hdr := map[string]string{":path": r.URL.RequestURI(), ":method": r.Method, ":authority": r.Host}
		for k, v := range r.Header {
			hdr[strings.ToLower(k)] = strings.Join(v, ",")
		}
		host, port, _ := net.SplitHostPort(r.RemoteAddr)
		p, _ := strconv.Atoi(port)
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
				SocketAddress: &corev3.SocketAddress{Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)}}}}},
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Method: r.Method, Path: r.URL.RequestURI(), Host: r.Host, Scheme: "http", Protocol: "HTTP/1.1",
				Headers: hdr}},
		}}
		if withBody(r) {
			req.Attributes.Request.Http.RawBody, req.Attributes.Request.Http.Size = body, int64(len(body))
		}
		*checks++
		resp, err := authz.Check(r.Context(), req)
		if err != nil {
			http.Error(w, "ext_authz: "+err.Error(), http.StatusForbidden) // failure_mode_allow: false
			return
		}
		if d := resp.GetDeniedResponse(); d != nil {
			for _, h := range d.GetHeaders() {
				w.Header().Set(h.GetHeader().GetKey(), h.GetHeader().GetValue())
			}
			w.WriteHeader(int(d.GetStatus().GetCode()))
			io.WriteString(w, d.GetBody())
			return
		}
		ok := resp.GetOkResponse()
		for _, h := range ok.GetHeaders() {
			r.Header.Set(h.GetHeader().GetKey(), h.GetHeader().GetValue())
		}
		for _, h := range ok.GetHeadersToRemove() {
			r.Header.Del(h)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + path
}

func mcpClient(t *testing.T, endpoint, key string, opts ...client.ClientOption) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(endpoint, transport.WithHTTPHeaders(map[string]string{"X-API-Key": key}))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(c)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "mesh-e2e", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize through %s: %v", endpoint, err)
	}
	return c
}

// TestMeshSidecar: MCP clients talk to a real MCP server through the sidecar; Lush's ext_authz
// (in `lushctl serve`) lets reads through with their decision, answers stubbed writes itself so
// the server never sees them, and refuses what the policy denies. The same call made through the
// gateway is logged with the same decision.
func TestMeshSidecar(t *testing.T) {
	upstream, rec := mcpserver.StartRecordedHTTP(t.Cleanup)
	dir := meshProject(t, upstream)
	hash := buildAndDeploy(t, dir)
	port, authzPort := freePort(t), freePort(t)
	logPath := filepath.Join(t.TempDir(), "decisions.db")
	p := startProc(t, serveEnv(dir, port, logPath, "off", fmt.Sprintf("LUSH_EXT_AUTHZ_LISTEN=127.0.0.1:%d", authzPort)), lushctlBin, "serve")
	waitFor(t, p, fmt.Sprintf("ext_authz (Envoy, gRPC): 127.0.0.1:%d", authzPort), 60*time.Second)

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", authzPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var checks int
	endpoint := sidecar(t, authv3.NewAuthorizationClient(conn), upstream, &checks)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := mcpClient(t, endpoint, meshAlice)
	tools, err := alice.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list through the sidecar: %v %v", tools, err)
	}
	res, err := alice.CallTool(ctx, callReq("echo", map[string]any{"text": "through the mesh"}))
	if err != nil || res.IsError || mcp.GetTextFromContent(res.Content[0]) != "through the mesh" {
		t.Fatalf("echo through the sidecar: %v %v", res, err)
	}
	res, err = alice.CallTool(ctx, callReq("write_note", map[string]any{"text": "do not write"}))
	if err != nil || !strings.Contains(mcp.GetTextFromContent(res.Content[0]), "[stub] write_note was NOT executed") {
		t.Fatalf("write_note through the sidecar: %v %v", res, err)
	}
	if calls := rec.Calls(); !slices.Equal(calls, []string{"echo"}) {
		t.Errorf("the MCP server received %v; only echo may reach it (the write is stubbed at the sidecar)", calls)
	}

	// bob may not use the server: he cannot even start a session. His client is told why, in a
	// JSON-RPC error.
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bob","version":"1"}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-API-Key", meshBob)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		ID    int `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || answer.ID != 1 || answer.Error.Code != -32001 || !strings.Contains(answer.Error.Message, "user:bob") ||
		resp.Header.Get("X-Lush-Decision-Id") == "" {
		t.Errorf("bob's initialize through the sidecar: %d %+v", resp.StatusCode, answer)
	}

	// The same echo through the gateway.
	gw := mcpClient(t, fmt.Sprintf("http://127.0.0.1:%d/gateway/agents/assistant/mcp", port), meshAlice)
	if res, err := gw.CallTool(ctx, callReq("echo", map[string]any{"text": "through the mesh"})); err != nil || res.IsError {
		t.Fatalf("echo through the gateway: %v %v", res, err)
	}
	gw.Close()
	alice.Close()
	if code := p.stop(t); code != 0 {
		t.Errorf("serve exited %d", code)
	}

	recs := readDecisions(t, logPath)
	var mesh, gateway []decisionlog.Event
	for _, r := range recs {
		if r.Event.Action != "tools/call" {
			continue
		}
		switch r.Event.Point {
		case "ext_authz":
			mesh = append(mesh, r.Event)
		case "mcp-gateway":
			gateway = append(gateway, r.Event)
		}
	}
	if len(mesh) != 2 || len(gateway) != 1 {
		t.Fatalf("tools/call decisions: %d at ext_authz, %d at the gateway; want 2 and 1", len(mesh), len(gateway))
	}
	if mesh[1].Outcome != "stub" || mesh[1].ToolName != "write_note" {
		t.Errorf("the write's decision: %s %s", mesh[1].Outcome, mesh[1].ToolName)
	}
	// One decision, whichever enforcement point made it.
	a, b := mesh[0], gateway[0]
	if string(a.Input) != string(b.Input) || string(a.Result) != string(b.Result) || a.Revision != hash || b.Revision != hash {
		t.Errorf("the same call decided differently:\next_authz input %s result %s\ngateway   input %s result %s", a.Input, a.Result, b.Input, b.Result)
	}
	for _, e := range []decisionlog.Event{a, b} {
		if e.Principal != "user:alice" || e.Tool != "mcp://notes.internal/mcp" || e.ToolName != "echo" || e.Outcome != "allow" || e.Access != "read" {
			t.Errorf("event %+v", e)
		}
	}
	if checks < 5 {
		t.Errorf("only %d checks for initialize, notifications, tools/list and two calls", checks)
	}
}

func callReq(name string, args map[string]any) mcp.CallToolRequest {
	r := mcp.CallToolRequest{}
	r.Params.Name, r.Params.Arguments = name, args
	return r
}

func readDecisions(t *testing.T, path string) []decisionlog.Record {
	t.Helper()
	r, err := decisionlog.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs, err := r.Query(context.Background(), decisionlog.Filter{Oldest: true, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestMeshXDSFollowsDeploys runs `lushctl mesh xds` on a project and subscribes to it as a
// sidecar does (go-control-plane's ADS client): the deployed build's clusters arrive; after
// `lushctl deploy` of a build with another server, the new ones do.
func TestMeshXDSFollowsDeploys(t *testing.T) {
	dir := meshProject(t, "http://127.0.0.1:1/mcp")
	buildAndDeploy(t, dir)
	ready := filepath.Join(t.TempDir(), "ready")
	p := startProc(t, nil, lushctlBin, "mesh", "xds", "--listen", "127.0.0.1:0", "--ready-file", ready, dir)
	waitFor(t, p, "lush xds: serving on", 60*time.Second)
	addr, err := os.ReadFile(ready)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(string(addr), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := adsclient.NewADSClient(ctx, &corev3.Node{Id: "sidecar-e2e"}, resource.ClusterType)
	if err := c.InitConnect(conn); err != nil {
		t.Fatal(err)
	}
	clusters := func() []string {
		t.Helper()
		resp, err := c.Fetch()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, a := range resp.Resources {
			cl := &clusterv3.Cluster{}
			a.UnmarshalTo(cl)
			names = append(names, cl.Name)
		}
		if err := c.Ack(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(names)
		return names
	}
	if got := clusters(); !slices.Equal(got, []string{"lush", "lush_ext_authz", "mcp_http_127_0_0_1_1"}) {
		t.Fatalf("first snapshot: %v", got)
	}
	// A new build: the notes server moves.
	lush := filepath.Join(dir, "lush.yaml")
	data, _ := os.ReadFile(lush)
	os.WriteFile(lush, []byte(strings.Replace(string(data), "http://127.0.0.1:1/mcp", "https://notes.example.com/mcp", 1)), 0o644)
	hash := buildAndDeploy(t, dir)
	if got := clusters(); !slices.Equal(got, []string{"lush", "lush_ext_authz", "mcp_https_notes_example_com"}) {
		t.Fatalf("after lushctl deploy: %v", got)
	}
	waitFor(t, p, "lush xds: build "+hash[:12], 10*time.Second)
	if code := p.stop(t); code != 0 {
		t.Errorf("mesh xds exited %d", code)
	}
}

// TestMeshHeadersOnly: on a route where no call's decision needs the body (the reader agent may
// only read the notes server, and no policy reads its tools' arguments), the xDS `lushctl mesh xds`
// emits sends MCP 2026 requests (by their MCP-Protocol-Version) to a route that turns body
// buffering off, and the others to one that keeps it. Through a sidecar that follows those
// routes, Lush decides an MCP 2026 client's requests from their Mcp-Method and Mcp-Name headers:
// discovery, the list, a read, and a denied write, each logged without arguments. An older
// client's requests still come with their bodies, and are decided from them.
func TestMeshHeadersOnly(t *testing.T) {
	upstream, rec := mcpserver.StartRecordedHTTP(t.Cleanup)
	dir := meshProject(t, upstream)
	writeProjectFile(t, dir, "agents/reader/spec.yaml", `name: reader
model: gemini-2.5-flash
description: Reads notes.
tools:
  - server: mcp://notes.internal/mcp
    access: read
acl:
  - principal: group:eng
    role: execute
`)
	writeProjectFile(t, dir, "scripts/reader.yaml", "turns: []\n")
	buildAndDeploy(t, dir)

	// The routes the generated xDS has for each path: their header matchers, and whether they
	// turn body buffering off.
	var printed struct {
		Routes []struct {
			VirtualHosts []struct {
				Routes []struct {
					Match struct {
						Path    string `json:"path"`
						Headers []struct {
							Name        string `json:"name"`
							StringMatch struct {
								SafeRegex struct {
									Regex string `json:"regex"`
								} `json:"safe_regex"`
							} `json:"string_match"`
						} `json:"headers"`
					} `json:"match"`
					PerFilter map[string]struct {
						CheckSettings struct {
							NoBody bool `json:"disable_request_body_buffering"`
						} `json:"check_settings"`
					} `json:"typed_per_filter_config"`
				} `json:"routes"`
			} `json:"virtual_hosts"`
		} `json:"routes"`
	}
	if err := json.Unmarshal([]byte(runLushctl(t, "mesh", "xds", "--print", dir)), &printed); err != nil {
		t.Fatal(err)
	}
	type envoyRoute struct {
		version *regexp.Regexp // the MCP-Protocol-Version the route requires; nil: any
		noBody  bool
	}
	byPath := map[string][]envoyRoute{}
	for _, r := range printed.Routes[0].VirtualHosts[0].Routes {
		if r.Match.Path == "" {
			continue
		}
		er := envoyRoute{noBody: r.PerFilter["envoy.filters.http.ext_authz"].CheckSettings.NoBody}
		for _, h := range r.Match.Headers {
			if h.Name != "mcp-protocol-version" {
				t.Fatalf("route %s matches header %s", r.Match.Path, h.Name)
			}
			er.version = regexp.MustCompile("^(?:" + h.StringMatch.SafeRegex.Regex + ")$")
		}
		byPath[r.Match.Path] = append(byPath[r.Match.Path], er)
	}
	const readerPath, assistantPath = "/agents/reader/tools/notes/mcp", "/agents/assistant/tools/notes/mcp"
	if rs := byPath[readerPath]; len(rs) != 2 || rs[0].version == nil || !rs[0].noBody || rs[1].version != nil || rs[1].noBody {
		t.Fatalf("routes of %s: %+v; want one for MCP 2026 without the body, then one with it", readerPath, rs)
	}
	if rs := byPath[assistantPath]; len(rs) != 1 || rs[0].noBody {
		t.Fatalf("routes of %s: %+v; want one, with the body (the assistant may write)", assistantPath, rs)
	}
	// As Envoy does: the first route that matches the request.
	withBody := func(path string) func(*http.Request) bool {
		return func(r *http.Request) bool {
			for _, er := range byPath[path] {
				if er.version == nil || er.version.MatchString(r.Header.Get("Mcp-Protocol-Version")) {
					return !er.noBody
				}
			}
			t.Errorf("no route of %s matches", path)
			return true
		}
	}

	port, authzPort := freePort(t), freePort(t)
	logPath := filepath.Join(t.TempDir(), "decisions.db")
	p := startProc(t, serveEnv(dir, port, logPath, "off", fmt.Sprintf("LUSH_EXT_AUTHZ_LISTEN=127.0.0.1:%d", authzPort)), lushctlBin, "serve")
	waitFor(t, p, fmt.Sprintf("ext_authz (Envoy, gRPC): 127.0.0.1:%d", authzPort), 60*time.Second)
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", authzPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var checks int
	endpoint := sidecarRoute(t, authv3.NewAuthorizationClient(conn), upstream, readerPath, withBody(readerPath), &checks)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.NewStreamableHttpClient(endpoint, transport.WithHTTPHeaders(map[string]string{"X-API-Key": meshAlice}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "mesh-e2e-2026", Version: "1"}
	ir, err := c.Initialize(ctx, init)
	if err != nil || ir.ProtocolVersion != "2026-07-28" {
		t.Fatalf("server/discover through the sidecar, from headers: %+v %v", ir, err)
	}
	if tools, err := c.ListTools(ctx, mcp.ListToolsRequest{}); err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list from headers: %v %v", tools, err)
	}
	res, err := c.CallTool(ctx, callReq("echo", map[string]any{"text": "decided from headers"}))
	if err != nil || res.IsError || mcp.GetTextFromContent(res.Content[0]) != "decided from headers" {
		t.Fatalf("echo from headers: %v %v", res, err)
	}
	if _, err := c.CallTool(ctx, callReq("write_note", map[string]any{"text": "no"})); err == nil {
		t.Errorf("write_note by the read-only reader went through")
	}
	c.Close()

	// An older client on the same path takes the route with bodies, and is decided from them.
	old := mcpClient(t, endpoint, meshAlice, client.WithProtocolVersion("2025-11-25"))
	if res, err := old.CallTool(ctx, callReq("echo", map[string]any{"text": "with a body"})); err != nil || res.IsError {
		t.Fatalf("echo of a 2025-11-25 client: %v %v", res, err)
	}
	old.Close()
	if calls := rec.Calls(); !slices.Equal(calls, []string{"echo", "echo"}) {
		t.Errorf("the MCP server received %v; only the two echoes may reach it", calls)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("serve exited %d", code)
	}

	var calls []decisionlog.Event
	for _, r := range readDecisions(t, logPath) {
		if r.Event.Point == "ext_authz" && r.Event.Action == "tools/call" {
			calls = append(calls, r.Event)
		}
	}
	want := []struct {
		name, outcome string
		arguments     bool // logged: the decision saw them
	}{{"echo", "allow", false}, {"write_note", "deny", false}, {"echo", "allow", true}}
	if len(calls) != len(want) {
		t.Fatalf("%d tools/call decisions, want %d: %+v", len(calls), len(want), calls)
	}
	for i, w := range want {
		var in map[string]any
		json.Unmarshal(calls[i].Input, &in)
		if _, logged := in["arguments"]; calls[i].ToolName != w.name || calls[i].Outcome != w.outcome || logged != w.arguments {
			t.Errorf("decision %d: %s %s, arguments logged %v (%s); want %s %s, %v", i, calls[i].ToolName, calls[i].Outcome, logged, calls[i].Input,
				w.name, w.outcome, w.arguments)
		}
	}
}

// writeProjectFile writes rel in the project dir.
func writeProjectFile(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
