package mcphttp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// recordHandler answers with the request as the transport gave it, and logs at each level.
type recordHandler struct {
	mu   sync.Mutex
	last *Request
}

// paramSchema is the input schema of the tool "region" of recordHandler: its argument region is
// mirrored in the Mcp-Param-Region header.
const paramSchema = `{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer","x-mcp-header":"N"},"q":{"type":"string"}}}`

func (h *recordHandler) Serve(_ context.Context, r *Request) (any, error) {
	h.mu.Lock()
	h.last = r
	h.mu.Unlock()
	switch r.Method {
	case "fail":
		return nil, Errorf(CodeInvalidParams, "bad params")
	case "no-resource":
		return nil, &Error{Code: codeResourceNotFound, Message: "resource not found", Data: map[string]any{"uri": "file:///x"}}
	case "missing":
		return nil, Errorf(CodeMethodNotFound, "no such method")
	case "needs-sampling":
		return nil, &Error{Code: CodeMissingClientCapability, Message: "sampling is required", Data: map[string]any{"requiredCapabilities": map[string]any{"sampling": map[string]any{}}}}
	case "tools/call":
		if err := r.CheckParamHeaders(json.RawMessage(paramSchema)); err != nil {
			return nil, err
		}
	case "input":
		return json.RawMessage(`{"resultType":"input_required","inputRequests":{"a":{"method":"sampling/createMessage","params":{}},"b":{"method":"elicitation/create","params":{}}}}`), nil
	case "log":
		for _, level := range []string{"debug", "info", "warning", "error"} {
			r.Notify("notifications/message", map[string]any{"level": level, "data": level})
		}
	}
	return map[string]any{"protocol": r.Protocol, "client": r.Client.Name, "caps": r.Capabilities(), "stateless": r.Stateless()}, nil
}

func (h *recordHandler) Notification(context.Context, *Request) {}

// statelessServer serves a recordHandler with stateless requests on.
func statelessServer(t *testing.T, stateless bool) (*httptest.Server, *recordHandler) {
	t.Helper()
	sessions, _ := NewSessions([]byte(strings.Repeat("k", 32)), 0)
	h := &recordHandler{}
	srv := NewServer(Config{Handler: h, Sessions: sessions, Stateless: stateless})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)
	return ts, h
}

// meta is the _meta of a stateless request of version v.
func meta(v string) map[string]any {
	return map[string]any{MetaProtocolVersion: v, MetaClientInfo: map[string]any{"name": "c", "version": "1"}, MetaClientCapabilities: map[string]any{"sampling": map[string]any{}}}
}

// statelessPost posts one message with the given headers (the header names as written, in any
// case) and returns the status and the decoded body (nil when there is none).
func statelessPost(t *testing.T, url string, headers map[string]string, msg map[string]any) (int, string, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
	req.Host = "localhost"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header[k] = []string{v} // as written: the server must read header names in any case
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		json.Unmarshal(raw, &out)
	}
	return resp.StatusCode, string(raw), out
}

func errorCode(body map[string]any) float64 {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return c
}

// Stateless requests (2026-07-28) are served without a session when their version, _meta and
// headers agree; each way they can disagree is refused with the status and code the
// specification gives, naming what is wrong, and with the request's id.
func TestStatelessRequests(t *testing.T) {
	ts, _ := statelessServer(t, true)
	const v = "2026-07-28"
	std := func(method string) map[string]string {
		return map[string]string{"MCP-Protocol-Version": v, "Mcp-Method": method}
	}
	with := func(h map[string]string, k, val string) map[string]string {
		out := map[string]string{}
		for a, b := range h {
			out[a] = b
		}
		if val == "" {
			delete(out, k)
		} else {
			out[k] = val
		}
		return out
	}
	call := func(name string, args map[string]any, m map[string]any) map[string]any {
		p := map[string]any{"name": name, "_meta": m}
		if args != nil {
			p["arguments"] = args
		}
		return map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": p}
	}
	req := func(method string, params map[string]any) map[string]any {
		return map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
	}
	callHeaders := with(std("tools/call"), "Mcp-Name", "region")
	tests := []struct {
		name    string
		headers map[string]string
		msg     map[string]any
		status  int
		code    float64 // 0: a result
		message string  // in the error's message
	}{
		{"served", std("tools/list"), req("tools/list", map[string]any{"_meta": meta(v)}), 200, 0, ""},
		{"header names in any case", map[string]string{"mcp-protocol-version": v, "MCP-METHOD": "tools/list"}, req("tools/list", map[string]any{"_meta": meta(v)}), 200, 0, ""},
		{"no clientInfo", std("tools/list"), req("tools/list", map[string]any{"_meta": map[string]any{MetaProtocolVersion: v, MetaClientCapabilities: map[string]any{}}}), 200, 0, ""},
		{"no _meta", std("server/discover"), req("server/discover", map[string]any{}), 400, CodeInvalidParams, MetaProtocolVersion},
		{"no params", std("server/discover"), map[string]any{"jsonrpc": "2.0", "id": 7, "method": "server/discover"}, 400, CodeInvalidParams, MetaProtocolVersion},
		{"no capabilities", std("server/discover"), req("server/discover", map[string]any{"_meta": map[string]any{MetaProtocolVersion: v}}), 400, CodeInvalidParams, MetaClientCapabilities},
		{"capabilities not an object", std("server/discover"), req("server/discover", map[string]any{"_meta": map[string]any{MetaProtocolVersion: v, MetaClientCapabilities: "all"}}), 400, CodeInvalidParams, MetaClientCapabilities},
		{"clientInfo not an object", std("server/discover"), req("server/discover", map[string]any{"_meta": map[string]any{MetaProtocolVersion: v, MetaClientCapabilities: map[string]any{}, MetaClientInfo: 3}}), 400, CodeInvalidParams, MetaClientInfo},
		{"bad log level", std("server/discover"), req("server/discover", map[string]any{"_meta": map[string]any{MetaProtocolVersion: v, MetaClientCapabilities: map[string]any{}, MetaLogLevel: "loud"}}), 400, CodeInvalidParams, MetaLogLevel},
		{"no version header", map[string]string{"Mcp-Method": "server/discover"}, req("server/discover", map[string]any{"_meta": meta(v)}), 400, CodeHeaderMismatch, HeaderProtocol},
		{"version header disagrees", std("server/discover"), req("server/discover", map[string]any{"_meta": meta("v999.0.0")}), 400, CodeHeaderMismatch, "does not match"},
		{"session-era header, stateless _meta", with(std("server/discover"), "MCP-Protocol-Version", "2025-11-25"), req("server/discover", map[string]any{"_meta": meta(v)}), 400, CodeHeaderMismatch, "does not match"},
		{"unknown version", with(std("server/discover"), "MCP-Protocol-Version", "v999.0.0"), req("server/discover", map[string]any{"_meta": meta("v999.0.0")}), 400, CodeUnsupportedProtocolVersion, "v999.0.0"},
		{"unknown version header alone", with(std("tools/list"), "MCP-Protocol-Version", "1900-01-01"), req("tools/list", map[string]any{}), 400, CodeUnsupportedProtocolVersion, "1900-01-01"},
		{"no Mcp-Method", with(std("tools/list"), "Mcp-Method", ""), req("tools/list", map[string]any{"_meta": meta(v)}), 400, CodeHeaderMismatch, HeaderMethod},
		{"Mcp-Method disagrees", std("prompts/list"), req("tools/list", map[string]any{"_meta": meta(v)}), 400, CodeHeaderMismatch, `prompts/list`},
		{"Mcp-Method in another case", std("TOOLS/LIST"), req("tools/list", map[string]any{"_meta": meta(v)}), 400, CodeHeaderMismatch, "TOOLS/LIST"},
		{"no Mcp-Name", std("tools/call"), call("region", nil, meta(v)), 400, CodeHeaderMismatch, HeaderName},
		{"Mcp-Name disagrees", with(std("tools/call"), "Mcp-Name", "other"), call("region", nil, meta(v)), 400, CodeHeaderMismatch, `other`},
		{"Mcp-Name with spaces around", with(std("tools/call"), "Mcp-Name", "  region\t"), call("region", nil, meta(v)), 200, 0, ""},
		{"Mcp-Name in Base64", with(std("prompts/get"), "Mcp-Name", "=?base64?aMOpbGxv?="), req("prompts/get", map[string]any{"name": "héllo", "_meta": meta(v)}), 200, 0, ""},
		{"Mcp-Name in bad Base64", with(std("prompts/get"), "Mcp-Name", "=?base64?aMOpbGxv=?="), req("prompts/get", map[string]any{"name": "héllo", "_meta": meta(v)}), 400, CodeHeaderMismatch, "Base64"},
		{"Mcp-Name of a resource", with(std("resources/read"), "Mcp-Name", "file:///a"), req("resources/read", map[string]any{"uri": "file:///a", "_meta": meta(v)}), 200, 0, ""},
		{"Mcp-Name of another resource", with(std("resources/read"), "Mcp-Name", "file:///b"), req("resources/read", map[string]any{"uri": "file:///a", "_meta": meta(v)}), 400, CodeHeaderMismatch, "file:///b"},
		{"Mcp-Name of a task", with(std("tasks/get"), "Mcp-Name", "t-1"), req("tasks/get", map[string]any{"taskId": "t-1", "_meta": meta(v)}), 200, 0, ""},
		{"Mcp-Name of another task", with(std("tasks/cancel"), "Mcp-Name", "t-2"), req("tasks/cancel", map[string]any{"taskId": "t-1", "_meta": meta(v)}), 400, CodeHeaderMismatch, "t-2"},
		{"no Mcp-Name of a task", std("tasks/update"), req("tasks/update", map[string]any{"taskId": "t-1", "_meta": meta(v)}), 400, CodeHeaderMismatch, "taskId"},
		{"removed: initialize", std("initialize"), req("initialize", map[string]any{"_meta": meta(v)}), 404, CodeMethodNotFound, "initialize"},
		{"removed: ping", std("ping"), req("ping", map[string]any{"_meta": meta(v)}), 404, CodeMethodNotFound, "ping"},
		{"removed: logging/setLevel", std("logging/setLevel"), req("logging/setLevel", map[string]any{"_meta": meta(v)}), 404, CodeMethodNotFound, ""},
		{"removed: resources/subscribe", std("resources/subscribe"), req("resources/subscribe", map[string]any{"_meta": meta(v)}), 404, CodeMethodNotFound, ""},
		{"unknown method: 404", std("missing"), req("missing", map[string]any{"_meta": meta(v)}), 404, CodeMethodNotFound, ""},
		{"a handler's invalid params: 200", std("fail"), req("fail", map[string]any{"_meta": meta(v)}), 200, CodeInvalidParams, ""},
		{"resource not found: -32602", std("no-resource"), req("no-resource", map[string]any{"_meta": meta(v)}), 200, CodeInvalidParams, "file:///x"},
		{"a missing capability: 400", std("needs-sampling"), req("needs-sampling", map[string]any{"_meta": meta(v)}), 400, CodeMissingClientCapability, ""},
		{"input requests the client can answer", std("input"), req("input", map[string]any{"_meta": map[string]any{MetaProtocolVersion: v, MetaClientCapabilities: map[string]any{"sampling": map[string]any{}, "elicitation": map[string]any{}}}}), 200, 0, "input_required"},
		{"input requests the client cannot answer", std("input"), req("input", map[string]any{"_meta": meta(v)}), 400, CodeMissingClientCapability, `"requiredCapabilities":{"elicitation":{}}`},
		{"a response from the client", std(""), map[string]any{"jsonrpc": "2.0", "id": 7, "result": map[string]any{"_meta": meta(v)}}, 400, CodeInvalidRequest, ""},
		{"param header matches", with(callHeaders, "Mcp-Param-Region", "eu"), call("region", map[string]any{"region": "eu", "q": "x"}, meta(v)), 200, 0, ""},
		{"param header in lower case", with(callHeaders, "mcp-param-region", "eu"), call("region", map[string]any{"region": "eu"}, meta(v)), 200, 0, ""},
		{"param header in Base64", with(callHeaders, "Mcp-Param-Region", "=?base64?SGVsbG8=?="), call("region", map[string]any{"region": "Hello"}, meta(v)), 200, 0, ""},
		{"param header, bad Base64", with(callHeaders, "Mcp-Param-Region", "=?base64?SGVsbG8?="), call("region", map[string]any{"region": "Hello"}, meta(v)), 400, CodeHeaderMismatch, "Mcp-Param-Region"},
		{"param header missing", callHeaders, call("region", map[string]any{"region": "eu"}, meta(v)), 400, CodeHeaderMismatch, "Mcp-Param-Region"},
		{"param header disagrees", with(callHeaders, "Mcp-Param-Region", "us"), call("region", map[string]any{"region": "eu"}, meta(v)), 400, CodeHeaderMismatch, "Mcp-Param-Region"},
		{"param header, integer", with(with(callHeaders, "Mcp-Param-Region", "eu"), "Mcp-Param-N", "42"), call("region", map[string]any{"region": "eu", "n": 42}, meta(v)), 200, 0, ""},
		{"param header, other integer", with(with(callHeaders, "Mcp-Param-Region", "eu"), "Mcp-Param-N", "41"), call("region", map[string]any{"region": "eu", "n": 42}, meta(v)), 400, CodeHeaderMismatch, "Mcp-Param-N"},
		{"param header without argument", with(callHeaders, "Mcp-Param-Region", "eu"), call("region", map[string]any{}, meta(v)), 400, CodeHeaderMismatch, "Mcp-Param-Region"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, raw, body := statelessPost(t, ts.URL, tt.headers, tt.msg)
			if status != tt.status || errorCode(body) != tt.code {
				t.Fatalf("status %d, code %v; want %d, %v: %s", status, errorCode(body), tt.status, tt.code, raw)
			}
			if id, _ := body["id"].(float64); id != 7 {
				t.Errorf("the answer's id is %v, want 7: %s", body["id"], raw)
			}
			if tt.code == 0 && tt.message != "" {
				if !strings.Contains(raw, tt.message) {
					t.Errorf("the result does not hold %q: %s", tt.message, raw)
				}
				return
			}
			if tt.code == 0 {
				result, _ := body["result"].(map[string]any)
				if result["resultType"] != "complete" || result["stateless"] != true || result["protocol"] != v {
					t.Errorf("result %s: want resultType complete, stateless, protocol %s", raw, v)
				}
				return
			}
			if !strings.Contains(raw, tt.message) {
				t.Errorf("the error does not name %q: %s", tt.message, raw)
			}
		})
	}
}

// An unsupported version's error lists the versions served and echoes the one asked for; a
// server that does not serve stateless requests lists the session-era ones.
func TestUnsupportedVersionData(t *testing.T) {
	for _, stateless := range []bool{true, false} {
		ts, _ := statelessServer(t, stateless)
		status, raw, body := statelessPost(t, ts.URL, map[string]string{"MCP-Protocol-Version": "v999", "Mcp-Method": "server/discover"},
			map[string]any{"jsonrpc": "2.0", "id": "x", "method": "server/discover", "params": map[string]any{"_meta": meta("v999")}})
		data, _ := body["error"].(map[string]any)["data"].(map[string]any)
		want := `["2025-11-25","2025-06-18","2025-03-26"]`
		if stateless {
			want = `["2026-07-28","2025-11-25","2025-06-18","2025-03-26"]`
		}
		got, _ := json.Marshal(data["supported"])
		if status != 400 || errorCode(body) != CodeUnsupportedProtocolVersion || string(got) != want || data["requested"] != "v999" || body["id"] != "x" {
			t.Errorf("stateless %v: %d %s; want 400, -32022, supported %s", stateless, status, raw, want)
		}
	}
	ts, _ := statelessServer(t, false)
	status, raw, body := statelessPost(t, ts.URL, map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
		map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": map[string]any{"_meta": meta("2026-07-28")}})
	if status != 400 || errorCode(body) != CodeUnsupportedProtocolVersion {
		t.Errorf("a stateless request to a server without them: %d %s", status, raw)
	}
}

// A stateless request gets the client's capabilities and name from its own _meta, never from an
// earlier request; its log messages are those at or above the level it asks for, and none when
// it asks for none.
func TestStatelessRequestCarriesItsClient(t *testing.T) {
	ts, h := statelessServer(t, true)
	headers := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "log"}
	post := func(m map[string]any) string {
		_, raw, _ := statelessPost(t, ts.URL, headers, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "log", "params": map[string]any{"_meta": m}})
		return raw
	}
	m := meta("2026-07-28")
	raw := post(m)
	if strings.Contains(raw, "notifications/message") {
		t.Errorf("log messages without a log level: %s", raw)
	}
	h.mu.Lock()
	if got := string(h.last.Capabilities()); got != `{"sampling":{}}` || h.last.Client.Name != "c" || h.last.Session != nil {
		t.Errorf("capabilities %s, client %+v, session %v", got, h.last.Client, h.last.Session)
	}
	h.mu.Unlock()
	m[MetaLogLevel] = "warning"
	m[MetaClientCapabilities] = map[string]any{}
	raw = post(m)
	for level, want := range map[string]bool{"debug": false, "info": false, "warning": true, "error": true} {
		if got := strings.Contains(raw, `"data":"`+level+`"`); got != want {
			t.Errorf("log level warning: a %s message sent %v, want %v: %s", level, got, want, raw)
		}
	}
	h.mu.Lock()
	if got := string(h.last.Capabilities()); got != `{}` {
		t.Errorf("the capabilities of an earlier request were kept: %s", got)
	}
	h.mu.Unlock()
}

// Session-era requests keep their behaviour: initialize opens a session, the headers of
// 2026-07-28 are checked only when present, and GET and DELETE of a stateless client are 405.
func TestSessionEraBesideStateless(t *testing.T) {
	ts, h := statelessServer(t, true)
	c := testClient{t: t, url: ts.URL}
	sid := c.initialize()
	if sid == "" {
		t.Fatal("initialize opened no session")
	}
	status, raw, body := statelessPost(t, ts.URL, map[string]string{HeaderSession: sid, "MCP-Protocol-Version": "2025-06-18"},
		map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
	if status != 200 || body["result"].(map[string]any)["stateless"] != false || strings.Contains(raw, "resultType") {
		t.Errorf("a session-era request: %d %s", status, raw)
	}
	h.mu.Lock()
	if h.last.Session == nil || h.last.Protocol != "2025-06-18" {
		t.Errorf("session %v, protocol %q", h.last.Session, h.last.Protocol)
	}
	h.mu.Unlock()
	status, raw, body = statelessPost(t, ts.URL, map[string]string{HeaderSession: sid, "MCP-Protocol-Version": "2025-06-18", "Mcp-Method": "prompts/list"},
		map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
	if status != 400 || errorCode(body) != CodeHeaderMismatch {
		t.Errorf("a session-era request whose Mcp-Method disagrees: %d %s", status, raw)
	}
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		req, _ := http.NewRequest(method, ts.URL, nil)
		req.Host = "localhost"
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set(HeaderProtocol, "2026-07-28")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
			t.Errorf("%s of a stateless client: %s, Allow %q", method, resp.Status, resp.Header.Get("Allow"))
		}
	}
}

func TestWithResultType(t *testing.T) {
	for in, want := range map[string]string{
		`{}`:                                  `{"resultType":"complete"}`,
		`{"tools":[]}`:                        `{"resultType":"complete","tools":[]}`,
		`{"resultType":"input_required"}`:     `{"resultType":"input_required"}`,
		`{"a":{"resultType":"x"}}`:            `{"resultType":"complete","a":{"resultType":"x"}}`,
		`{ "a": 1 }`:                          `{"resultType":"complete","a": 1 }`,
		`[]`:                                  `[]`,
		`{"a":"\"resultType\":\"complete\""}`: `{"resultType":"complete","a":"\"resultType\":\"complete\""}`,
	} {
		if got := string(withResultType([]byte(in))); got != want {
			t.Errorf("withResultType(%s) = %s, want %s", in, got, want)
		}
	}
}

// A subscriptions/listen stream opens with the acknowledgement of what was established, then
// carries the endpoint's broadcasts the client opted in to, each tagged with the subscription's
// id, and none of the others; it ends with the request's result when the server stops.
func TestSubscriptionsListen(t *testing.T) {
	sessions, _ := NewSessions([]byte(strings.Repeat("k", 32)), 0)
	srv := NewServer(Config{Handler: &recordHandler{}, Sessions: sessions, Stateless: true, Endpoint: func(*http.Request) string { return "a" }})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)
	body := `{"jsonrpc":"2.0","id":"sub-1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"resourceSubscriptions":["file:///x"]},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
	req.Host = "localhost"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(HeaderProtocol, "2026-07-28")
	req.Header.Set(HeaderMethod, "subscriptions/listen")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events := readEvents(resp.Body)
	ack, _ := nextEvent(t, events)
	if !strings.Contains(ack.data, `"method":"notifications/subscriptions/acknowledged"`) || !strings.Contains(ack.data, `"notifications":{"toolsListChanged":true}`) ||
		!strings.Contains(ack.data, `"io.modelcontextprotocol/subscriptionId":"sub-1"`) {
		t.Fatalf("the first event is %s, want the acknowledgement of toolsListChanged alone", ack.data)
	}
	if n := srv.Broadcast("b", "notifications/tools/list_changed", nil); n != 0 {
		t.Errorf("another endpoint's broadcast reached %d streams", n)
	}
	srv.Broadcast("a", "notifications/prompts/list_changed", nil)
	srv.Broadcast("a", "notifications/tools/list_changed", nil)
	changed, _ := nextEvent(t, events)
	if !strings.Contains(changed.data, `"method":"notifications/tools/list_changed"`) || !strings.Contains(changed.data, `"io.modelcontextprotocol/subscriptionId":"sub-1"`) {
		t.Fatalf("the stream carries %s, want the tools list change, tagged", changed.data)
	}
	srv.Close()
	end, _ := nextEvent(t, events)
	if !strings.Contains(end.data, `"id":"sub-1"`) || !strings.Contains(end.data, `"result"`) {
		t.Errorf("the stream ends with %s, want the request's result", end.data)
	}
}
