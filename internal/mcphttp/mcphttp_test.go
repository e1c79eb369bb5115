package mcphttp

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseMessage(t *testing.T) {
	tests := []struct {
		body string
		kind string // request, notification, response, or error code
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, "request"},
		{`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x"}}`, "request"},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "notification"},
		{`{"jsonrpc":"2.0","id":7,"result":{}}`, "response"},
		{`{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"m"}}`, "response"},
		{``, "-32600"},
		{`{`, "-32700"},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, "-32600"},
		{`{"jsonrpc":"1.0","id":1,"method":"ping"}`, "-32600"},
		{`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, "-32600"},
		{`{"jsonrpc":"2.0","id":{},"method":"ping"}`, "-32600"},
		{`{"jsonrpc":"2.0"}`, "-32600"},
		{`{"jsonrpc":"2.0","id":1}`, "-32600"},
		{`{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}`, "-32602"},
		{`{"jsonrpc":"2.0","id":1,"method":"ping"} {}`, "-32700"},
	}
	for _, tt := range tests {
		m, err := parseMessage([]byte(tt.body))
		got := ""
		switch {
		case err != nil:
			got = jsonNumber(err.Code)
		case m.IsRequest():
			got = "request"
		case m.IsNotification():
			got = "notification"
		case m.IsResponse():
			got = "response"
		}
		if got != tt.kind {
			t.Errorf("parseMessage(%s) = %s (%v), want %s", tt.body, got, err, tt.kind)
		}
	}
}

// nested is a request whose params hold a value nested depth levels deep, counting the message
// and its params.
func nested(depth int, open, close string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"a":` + strings.Repeat(open, depth-2) + strings.Repeat(close, depth-2) + `}}`
}

// A message nested past encoding/json's limit is refused with an error that names the limit;
// brackets in strings do not count, and other syntax errors are reported as before.
func TestParseMessageDepth(t *testing.T) {
	const limit = "the message nests deeper than 10000 levels of arrays and objects, the limit: send a flatter message"
	tests := []struct {
		name string
		body string
		want string // the error's message; "" for a message accepted
	}{
		{"at the limit", nested(10000, "[", "]"), ""},
		{"one past the limit", nested(10001, "[", "]"), limit},
		{"objects past the limit", nested(10001, `{"a":`, "}"), limit},
		{"far past the limit, unclosed", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":` + strings.Repeat("[", 100000), limit},
		{"brackets in a string", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":"` + strings.Repeat(`[\"{`, 20000) + `"}}`, ""},
		{"brackets in a string, then a misplaced one", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":"` + strings.Repeat(`[\"{`, 20000) + `"[}}`,
			"the body is not valid JSON: syntax error at byte"},
		{"a syntax error after deep nesting", nested(9000, "[", "]")[:9100] + "x", "the body is not valid JSON: syntax error at byte"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := parseMessage([]byte(tt.body))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || err.Code != CodeParseError || !strings.HasPrefix(err.Message, tt.want)):
				t.Errorf("parseMessage = %v, %v; want %q", m, err, tt.want)
			}
		})
	}
}

// BenchmarkParseMessageRefused measures refusing a message nested past the limit after a 1 MB
// string (which the depth check reads through), against a message of the same size refused for
// another syntax error at the same place.
func BenchmarkParseMessageRefused(b *testing.B) {
	prefix := `{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"` + strings.Repeat(`[{\"`, 1<<18) + `","a":`
	for _, bm := range []struct{ name, body string }{
		{"too deep", prefix + strings.Repeat("[", 20000)},
		{"syntax error", prefix + strings.Repeat("[", 9000) + "x" + strings.Repeat("[", 10999)},
	} {
		b.Run(bm.name, func(b *testing.B) {
			body := []byte(bm.body)
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := parseMessage(body); err == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}

func jsonNumber(n int) string { b, _ := json.Marshal(n); return string(b) }

func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","method":"n","params":{}}`,
		`{"jsonrpc":"2.0","id":"x","result":null}`, `[]`, `{"id":1e999}`, "\x00", `{"jsonrpc":"2.0","id":-9223372036854775809,"method":"m"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := parseMessage(body)
		if (m == nil) == (err == nil) {
			t.Fatalf("parseMessage returned %v and %v", m, err)
		}
		if err != nil && strings.Contains(err.Message, "levels") && bytes.Count(body, []byte("["))+bytes.Count(body, []byte("{")) <= maxJSONDepth {
			t.Fatalf("%s is refused for its depth: %v", body, err)
		}
		if m != nil {
			// A message we accept is exactly one of the three kinds and can be answered.
			kinds := 0
			for _, k := range []bool{m.IsRequest(), m.IsNotification(), m.IsResponse()} {
				if k {
					kinds++
				}
			}
			if kinds != 1 {
				t.Fatalf("%s is %d kinds", body, kinds)
			}
			if _, err := response(m.ID, map[string]any{}, nil); err != nil {
				t.Fatalf("cannot answer %s: %v", body, err)
			}
		}
	})
}

func TestSessions(t *testing.T) {
	s, err := NewSessions([]byte(strings.Repeat("k", 32)), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	id, err := s.issue(Session{Endpoint: "a", Principal: PrincipalDigest("user:alice"), Protocol: "2025-11-25"}, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(id, "alice") {
		t.Error("the session id names its principal")
	}
	if sess, err := s.verify(id, "a", "user:alice"); err != nil || sess.Protocol != "2025-11-25" {
		t.Fatalf("verify = %+v, %v", sess, err)
	}
	other, _ := NewSessions([]byte(strings.Repeat("x", 32)), time.Hour)
	tamper := strings.Replace(id, id[10:12], "AA", 1)
	for name, check := range map[string]error{
		"wrong endpoint":  func() error { _, err := s.verify(id, "b", "user:alice"); return err }(),
		"other principal": func() error { _, err := s.verify(id, "a", "user:bob"); return err }(),
		"other key":       func() error { _, err := other.verify(id, "a", "user:alice"); return err }(),
		"tampered":        func() error { _, err := s.verify(tamper, "a", "user:alice"); return err }(),
		"garbage":         func() error { _, err := s.verify("lush1.x.y", "a", "user:alice"); return err }(),
	} {
		if check == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	now = now.Add(2 * time.Hour)
	if _, err := s.verify(id, "a", "user:alice"); err != ErrSessionExpired {
		t.Errorf("expired: %v", err)
	}
	now = now.Add(-2 * time.Hour)
	sess, _ := s.verify(id, "a", "user:alice")
	if err := s.terminate(sess); err != nil {
		t.Fatal(err)
	}
	if _, err := s.verify(id, "a", "user:alice"); err != ErrSessionTerminated {
		t.Errorf("terminated: %v", err)
	}
	if _, err := NewSessions([]byte("short"), 0); err == nil {
		t.Error("a short key was accepted")
	}
}

// Verified ids are remembered (verify skips the HMAC and the decoding of a known id), but what
// depends on the request still decides: the same answers as a first verification, with a cache
// that stays bounded and that only ever holds ids that verified.
func TestVerifiedSessionCache(t *testing.T) {
	s, _ := NewSessions([]byte(strings.Repeat("k", 32)), time.Hour)
	fresh, _ := NewSessions([]byte(strings.Repeat("k", 32)), time.Hour) // the same key, nothing cached
	id, _ := s.issue(Session{Endpoint: "a", Principal: PrincipalDigest("user:alice"), Protocol: "2025-11-25"}, "n1")
	tamper := id[:len(id)-2] + "AA"
	type answer struct {
		sess *Session
		err  error
	}
	for round := range 3 { // the first round fills the cache, the others hit it
		for _, c := range []struct{ id, endpoint, principal string }{
			{id, "a", "user:alice"}, {id, "b", "user:alice"}, {id, "a", "user:bob"}, {tamper, "a", "user:alice"},
			{"lush1.x.y", "a", "user:alice"}, {id + "x", "a", "user:alice"},
		} {
			got, err := s.verify(c.id, c.endpoint, c.principal)
			want, werr := fresh.verify(c.id, c.endpoint, c.principal)
			fresh.verified = map[string]*Session{}
			if err != werr || (got == nil) != (want == nil) || (got != nil && (got.ID != want.ID || got.Protocol != want.Protocol || got.Endpoint != want.Endpoint)) {
				t.Errorf("round %d, %+v: %+v, %v; uncached %+v, %v", round, c, answer{got, err}, err, answer{want, werr}, werr)
			}
		}
	}
	for k := range s.verified {
		if k != id {
			t.Errorf("cached an id that did not verify: %q", k)
		}
	}
	for i := range maxVerified + 10 {
		other, _ := s.issue(Session{Endpoint: "a", Principal: PrincipalDigest("user:alice")}, strconv.Itoa(i))
		if _, err := s.verify(other, "a", "user:alice"); err != nil {
			t.Fatal(err)
		}
		if len(s.verified) > maxVerified {
			t.Fatalf("%d cached ids", len(s.verified))
		}
	}
}

// A session id that belongs to another principal is answered exactly as an unknown one (status,
// headers, body), whatever else is true of it and whatever the request: the answer must not
// confirm that the session exists.
func TestAnotherPrincipalsSessionLooksUnknown(t *testing.T) {
	sessions, _ := NewSessions([]byte(strings.Repeat("k", 32)), time.Hour)
	other, _ := NewSessions([]byte(strings.Repeat("x", 32)), time.Hour)
	srv := NewServer(Config{Handler: echoHandler{}, Sessions: sessions,
		Endpoint:  func(r *http.Request) string { return strings.Trim(r.URL.Path, "/") },
		Principal: func(r *http.Request) string { return r.Header.Get("X-Principal") }})
	issue := func(s *Sessions, endpoint string, at time.Time) string {
		s.now = func() time.Time { return at }
		defer func() { s.now = time.Now }()
		id, err := s.issue(Session{Endpoint: endpoint, Principal: PrincipalDigest("user:alice"), Protocol: "2025-11-25"}, nonce())
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	live := issue(sessions, "a", time.Now())
	expired := issue(sessions, "a", time.Now().Add(-2*time.Hour))
	terminated := issue(sessions, "a", time.Now())
	if sess, err := sessions.verify(terminated, "a", "user:alice"); err != nil || sessions.terminate(sess) != nil {
		t.Fatalf("terminate alice's session: %v", err)
	}
	unknown := issue(other, "a", time.Now()) // well formed, signed with another key
	srv.legacy.Store("sse-alice", &legacySession{Session: Session{ID: "sse-alice", Endpoint: "a"}, principal: PrincipalDigest("user:alice")})

	// answer is what bob gets for one request.
	answer := func(method, target, session string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://localhost"+target, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("X-Principal", "user:bob")
		if session != "" {
			r.Header.Set(HeaderSession, session)
		}
		w := httptest.NewRecorder()
		if strings.HasPrefix(target, "/message") {
			r.URL.Path = "/a"
			srv.LegacyMessages(w, r)
		} else {
			srv.ServeHTTP(w, r)
		}
		return w
	}
	tests := []struct {
		name                    string
		method, target, session string // alice's session, as bob uses it
		unknownTarget, unknown  string // an unknown session, used the same way
	}{
		{"POST", http.MethodPost, "/a", live, "/a", unknown},
		{"GET", http.MethodGet, "/a", live, "/a", unknown},
		{"DELETE", http.MethodDelete, "/a", live, "/a", unknown},
		{"at another endpoint", http.MethodPost, "/b", live, "/b", unknown},
		{"expired", http.MethodPost, "/a", expired, "/a", unknown},
		{"terminated", http.MethodPost, "/a", terminated, "/a", unknown},
		{"legacy SSE", http.MethodPost, "/message?sessionId=sse-alice", "", "/message?sessionId=sse-nobody", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, want := answer(tt.method, tt.target, tt.session), answer(tt.method, tt.unknownTarget, tt.unknown)
			if got.Code != http.StatusNotFound || got.Code != want.Code || !reflect.DeepEqual(got.Header(), want.Header()) || !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
				t.Errorf("another principal's session: %d %v %s\nan unknown session:         %d %v %s",
					got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
			}
		})
	}
}

func TestOriginChecks(t *testing.T) {
	req := func(host, origin string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "http://"+host+"/mcp", nil)
		r.Host = host
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		return r
	}
	for _, ok := range []*http.Request{req("localhost:8080", ""), req("127.0.0.1:1", "http://localhost:3000"), req("[::1]:8080", "")} {
		if err := LoopbackOrigins(ok); err != nil {
			t.Errorf("%s refused: %v", ok.Host, err)
		}
	}
	for _, bad := range []*http.Request{req("evil.example.com", ""), req("localhost:8080", "http://evil.example.com"), req("127.0.0.1.nip.io", "")} {
		if LoopbackOrigins(bad) == nil {
			t.Errorf("host %s origin %s accepted", bad.Host, bad.Header.Get("Origin"))
		}
	}
	allow := AllowHosts("lush.internal")
	if allow(req("lush.internal:443", "https://lush.internal")) != nil || allow(req("lush.internalx", "")) == nil {
		t.Error("AllowHosts")
	}
}

// echoHandler answers every request with its method, sending one notification first.
type echoHandler struct{}

func (echoHandler) Serve(ctx context.Context, r *Request) (any, error) {
	if r.Method == "boom" {
		panic("boom")
	}
	r.Notify("notifications/progress", map[string]any{"progress": 1})
	return map[string]any{"method": r.Method}, nil
}
func (echoHandler) Notification(context.Context, *Request) {}

func TestServerStreamsAndRecovers(t *testing.T) {
	sessions, _ := NewSessions([]byte(strings.Repeat("k", 32)), 0)
	srv := NewServer(Config{Handler: echoHandler{}, Sessions: sessions})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	post := func(body, session, accept string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
		req.Host = "localhost"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", accept)
		if session != "" {
			req.Header.Set(HeaderSession, session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`, "", "application/json")
	sid := resp.Header.Get(HeaderSession)
	resp.Body.Close()
	if sid == "" {
		t.Fatal("no session id")
	}
	// A client that accepts streams gets the notification, then the response, as SSE.
	resp = post(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, sid, "application/json, text/event-stream")
	body := readAll(resp)
	if resp.Header.Get("Content-Type") != "text/event-stream" || !strings.Contains(body, "notifications/progress") || !strings.Contains(body, `"id":2`) {
		t.Errorf("stream = %s", body)
	}
	// A client that does not gets plain JSON.
	resp = post(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, sid, "application/json")
	if body := readAll(resp); !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !strings.Contains(body, `"method":"tools/list"`) {
		t.Errorf("json = %s", body)
	}
	// A handler that panics answers an internal error; the server lives on.
	resp = post(`{"jsonrpc":"2.0","id":4,"method":"boom"}`, sid, "application/json")
	if body := readAll(resp); !strings.Contains(body, `"code":-32603`) {
		t.Errorf("panic = %s", body)
	}
	resp = post(`{"jsonrpc":"2.0","id":5,"method":"ping"}`, sid, "application/json")
	if resp.StatusCode != 200 {
		t.Errorf("after a panic: %d", resp.StatusCode)
	}
	resp.Body.Close()
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
