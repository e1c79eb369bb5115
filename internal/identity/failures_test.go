package identity

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"

	"github.com/lush-agents/lush/internal/telemetry"
)

// logLine is one line Failures wrote (slog's JSON).
type logLine struct {
	Level      string `json:"level"`
	Msg        string `json:"msg"`
	Source     string `json:"source"`
	Endpoint   string `json:"endpoint"`
	Method     string `json:"method"`
	Reason     string `json:"reason"`
	Error      string `json:"error"`
	Suppressed int    `json:"suppressed"`
}

func logLines(t *testing.T, buf *bytes.Buffer) []logLine {
	t.Helper()
	var out []logLine
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var ll logLine
		if err := json.Unmarshal([]byte(l), &ll); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, ll)
	}
	return out
}

// scrape is m as Prometheus scrapes it.
func scrape(m *telemetry.Metrics) string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// counted is the sample of lush_authentication_failures_total for method and reason, as scraped.
func counted(method, reason string, n int) string {
	return fmt.Sprintf("lush_authentication_failures_total{method=%q,reason=%q} %d\n", method, reason, n)
}

// failures returns a reporter into fresh metrics, logging at Debug into the returned buffer, on clk.
func failures(clk *clock) (*Failures, *telemetry.Metrics, *bytes.Buffer) {
	m, buf := telemetry.NewMetrics(), &bytes.Buffer{}
	f := NewFailures(m, slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	f.limit = telemetry.NewLogLimiter(FailureLogInterval, failureLogKeys, clk.now)
	return f, m, buf
}

// TestFailures: each way a request can fail to authenticate is counted by the method it tried
// and the reason, and logged at its level with the source address and no credential, neither in
// the line nor in the metrics.
func TestFailures(t *testing.T) {
	keys(t)
	dir := t.TempDir()
	priv, pub := delegationKeys(t)
	a := newAuth(t, Config{
		JWT:        []JWTConfig{{Issuer: testIssuer, Audiences: []string{testAud}, KeyFile: writeFile(t, dir, "hs.secret", []byte(hmacSecret)), Algorithms: []string{"HS256"}}},
		APIKeys:    apiKeys,
		Proxy:      &ProxyConfig{Trusted: []string{"10.0.0.0/8"}},
		Delegation: &DelegationConfig{PublicKeys: []string{pub}},
	}, newClock())
	hs := func(c map[string]any) string { return mint(t, jwa.HS256(), []byte(hmacSecret), "", c) }
	signer := NewSigner(priv, "")
	signer.now = func() time.Time { return t0 }
	deleg, err := signer.Sign(Delegation{Principal: "user:alice", Agent: "researcher", Chain: []string{"researcher"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	expired, forged := hs(with(baseClaims(), "exp", t0.Add(-time.Hour).Unix())), mint(t, jwa.HS256(), []byte(strings.Repeat("k", 40)), "", baseClaims())
	wrongKey := ciKey[:len(ciKey)-1] + "0"
	tampered := deleg[:len(deleg)-4] + "AAAA"
	secrets := []string{ciKey, opsKey, wrongKey, expired, forged, deleg, tampered, hmacSecret}

	for _, tc := range []struct {
		name           string
		remote         string
		kv             []string
		method, reason string
		level          string
	}{
		{"no credentials", "192.0.2.1:1000", nil, "none", CodeMissingCredentials, "DEBUG"},
		{"an unknown API key", "192.0.2.2:1000", []string{"X-API-Key", wrongKey}, "apikey", CodeUnknownAPIKey, "WARN"},
		{"an unknown API key as a bearer token", "[2001:db8::1]:1000", []string{"Authorization", "Bearer " + wrongKey}, "apikey", CodeUnknownAPIKey, "WARN"},
		{"an empty API key", "192.0.2.3:1000", []string{"X-API-Key", " "}, "apikey", CodeInvalidRequest, "WARN"},
		{"an expired JWT", "192.0.2.4:1000", []string{"Authorization", "Bearer " + expired}, "jwt", CodeExpiredToken, "INFO"},
		{"a forged JWT", "192.0.2.5:1000", []string{"Authorization", "Bearer " + forged}, "jwt", CodeInvalidToken, "WARN"},
		{"a tampered delegation token", "192.0.2.6:1000", []string{"Authorization", "Bearer " + tampered}, "delegation", CodeInvalidToken, "WARN"},
		{"proxy headers from an untrusted address", "192.0.2.7:1000", []string{"X-Lush-Principal", "user:root"}, "proxy", CodeUntrustedProxy, "WARN"},
		{"a trusted proxy naming no principal", "10.0.0.1:1000", []string{"X-Lush-Groups", "ops"}, "proxy", CodeInvalidRequest, "WARN"},
		{"two credentials", "192.0.2.8:1000", []string{"X-API-Key", ciKey, "Authorization", "Bearer " + opsKey}, "unknown", CodeInvalidRequest, "WARN"},
		{"another scheme", "192.0.2.9:1000", []string{"Authorization", "Basic " + opsKey}, "unknown", CodeInvalidRequest, "WARN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, m, buf := failures(newClock())
			_, err := a.Authenticate(request(tc.remote, tc.kv...))
			if err == nil {
				t.Fatal("authenticated")
			}
			f.Report(context.Background(), tc.remote, "POST /agents/{agent}/mcp", err)
			metrics := scrape(m)
			if !strings.Contains(metrics, counted(tc.method, tc.reason, 1)) {
				t.Errorf("not counted as %s (error %v):\n%s", counted(tc.method, tc.reason, 1), err, metrics)
			}
			lines := logLines(t, buf)
			if len(lines) != 1 {
				t.Fatalf("%d lines: %s", len(lines), buf)
			}
			l := lines[0]
			host := strings.Trim(tc.remote[:strings.LastIndex(tc.remote, ":")], "[]")
			if l.Msg != "authentication failed" || l.Level != tc.level || l.Source != host || l.Method != tc.method || l.Reason != tc.reason ||
				l.Endpoint != "POST /agents/{agent}/mcp" || l.Error == "" || l.Suppressed != 0 {
				t.Errorf("line %+v; want level %s, source %s, method %s, reason %s", l, tc.level, host, tc.method, tc.reason)
			}
			for _, s := range secrets {
				if strings.Contains(buf.String(), s) || strings.Contains(metrics, s) {
					t.Errorf("a credential is in the log or the metrics: %s", buf)
				}
			}
		})
	}
}

// TestFailuresRateLimited: a flood from one address logs one line per reason per interval, and
// the next line says how many were held back; every failure is counted.
func TestFailuresRateLimited(t *testing.T) {
	clk := newClock()
	f, m, buf := failures(clk)
	ctx := context.Background()
	unknownKey := &Error{Code: CodeUnknownAPIKey, Method: MethodAPIKey, Message: "the API key is not configured"}
	badToken := &Error{Code: CodeInvalidToken, Method: MethodJWT, Message: "bad signature"}
	for range 5 {
		f.Report(ctx, "192.0.2.1:1000", "GET /audit/decisions", unknownKey)
		f.Report(ctx, "192.0.2.1:1001", "GET /audit/decisions", badToken)   // another reason: its own lines
		f.Report(ctx, "192.0.2.2:1000", "GET /audit/decisions", unknownKey) // another address: its own lines
	}
	clk.advance(FailureLogInterval)
	f.Report(ctx, "192.0.2.1:1002", "GET /audit/decisions", unknownKey)
	type key struct {
		source, reason string
		suppressed     int
	}
	var got []key
	for _, l := range logLines(t, buf) {
		got = append(got, key{l.Source, l.Reason, l.Suppressed})
	}
	want := []key{{"192.0.2.1", CodeUnknownAPIKey, 0}, {"192.0.2.1", CodeInvalidToken, 0}, {"192.0.2.2", CodeUnknownAPIKey, 0}, {"192.0.2.1", CodeUnknownAPIKey, 4}}
	if len(got) != len(want) {
		t.Fatalf("lines %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if metrics := scrape(m); !strings.Contains(metrics, counted("apikey", CodeUnknownAPIKey, 11)) {
		t.Errorf("not every failure counted:\n%s", metrics)
	}
}

// TestFailuresLabelsAreBounded: whatever an error holds, the labels come from fixed vocabularies,
// and a nil reporter does nothing.
func TestFailuresLabelsAreBounded(t *testing.T) {
	f, m, _ := failures(newClock())
	f.Report(context.Background(), "nonsense", "x", &Error{Code: "made_up_" + ciKey, Method: Method(opsKey), Message: "?"})
	f.Report(context.Background(), "192.0.2.1:1", "x", context.DeadlineExceeded)
	metrics := scrape(m)
	if !strings.Contains(metrics, counted("unknown", "other", 2)) || strings.Count(metrics, "lush_authentication_failures_total{") != 1 {
		t.Errorf("labels not from the vocabularies:\n%s", metrics)
	}
	var none *Failures
	none.Report(context.Background(), "192.0.2.1:1", "x", &Error{Code: CodeUnknownAPIKey, Message: "no"})
}
