package main

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/proto"
)

// An OPA decision-log collector receives gzip JSON arrays of events it understands; a file
// export has one event per line; a failed upload says how to resume.
func TestAuditExport(t *testing.T) {
	_, _, _, logPath := loggedDecisions(t)
	var mu sync.Mutex
	var batches [][]map[string]any
	var auth []string
	fail := false
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			http.Error(w, "collector is full", http.StatusServiceUnavailable)
			return
		}
		if r.Header.Get("Content-Encoding") != "gzip" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "not gzip json", http.StatusBadRequest)
			return
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var events []map[string]any
		if err := json.NewDecoder(zr).Decode(&events); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		batches = append(batches, events)
		auth = append(auth, r.Header.Get("Authorization"))
	}))
	defer collector.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("collector-token-123\n"), 0o600)

	r := lushctl(t, "", "audit", "export", "--log", logPath, "--opa-url", collector.URL+"/logs", "--batch", "2", "--token-file", tokenFile)
	if r.code != 0 || !strings.Contains(r.stderr, "exported 3 decisions") {
		t.Fatalf("export: %d %s", r.code, r.stderr)
	}
	mu.Lock()
	got, gotAuth := batches, auth
	mu.Unlock()
	if len(got) != 2 || len(got[0]) != 2 || len(got[1]) != 1 || gotAuth[0] != "Bearer collector-token-123" {
		t.Fatalf("batches %d, auth %v", len(got), gotAuth)
	}
	ev := got[0][0]
	for _, field := range []string{"decision_id", "path", "input", "result", "timestamp", "bundles", "labels", "metrics"} {
		if _, ok := ev[field]; !ok {
			t.Errorf("an exported event has no %q (OPA's field): %v", field, ev)
		}
	}
	if ev["principal"] != "user:bob" || ev["path"] != "lush/authz/decision" {
		t.Errorf("event %v", ev)
	}

	mu.Lock()
	fail = true
	mu.Unlock()
	r = lushctl(t, "", "audit", "export", "--log", logPath, "--opa-url", collector.URL, "--batch", "2", "--after", "1", "--token-file", tokenFile)
	if r.code != exitRuntime || !strings.Contains(r.stderr, "503") || !strings.Contains(r.stderr, "resume with --after 1") ||
		strings.Contains(r.stderr, "collector-token-123") {
		t.Errorf("failed upload: %d %s", r.code, r.stderr)
	}

	out := filepath.Join(t.TempDir(), "decisions.jsonl")
	if r := lushctl(t, "", "audit", "export", "--log", logPath, "--out", out); r.code != 0 {
		t.Fatalf("file export: %s", r.stderr)
	}
	data, _ := os.ReadFile(out)
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) != 3 || !strings.Contains(lines[0], `"decision_id"`) {
		t.Errorf("file: %s", data)
	}
	for _, args := range [][]string{{"--out", out, "--opa-url", collector.URL}, {}, {"--opa-url", "ftp://x"}, {"--out", out, "--batch", "0"}} {
		if r := lushctl(t, "", append([]string{"audit", "export", "--log", logPath}, args...)...); r.code != exitUsage {
			t.Errorf("%v: exit %d", args, r.code)
		}
	}
}

// An OpenTelemetry collector receives one OTLP log record per decision.
func TestAuditExportOTLP(t *testing.T) {
	_, _, _, logPath := loggedDecisions(t)
	var mu sync.Mutex
	var got []*logspb.LogRecord
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &collogs.ExportLogsServiceRequest{}
		if r.URL.Path != "/v1/logs" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "not OTLP logs", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rl := range req.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				got = append(got, sl.LogRecords...)
			}
		}
	}))
	defer collector.Close()
	if r := lushctl(t, "", "audit", "export", "--log", logPath, "--otlp-url", collector.URL+"/"); r.code != 0 {
		t.Fatalf("export: %d %s", r.code, r.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("%d log records", len(got))
	}
	attrs := func(lr *logspb.LogRecord) map[string]string {
		out := map[string]string{}
		for _, kv := range lr.Attributes {
			out[kv.Key] = kv.Value.GetStringValue()
		}
		return out
	}
	bob, carol := attrs(got[0]), attrs(got[1])
	if bob["lush.principal"] != "user:bob" || bob["lush.outcome"] != "allow" || got[0].SeverityText != "INFO" ||
		carol["lush.outcome"] != "deny" || got[1].SeverityText != "WARN" || !strings.Contains(got[0].Body.GetStringValue(), `"decision_id"`) {
		t.Errorf("records: %v %v %s", bob, carol, got[1].SeverityText)
	}
}
