package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/enforce"
	"github.com/lush-agents/lush/scheduler"
	"github.com/lush-agents/lush/test/projecttest"
)

// TestLoopExitCodes: lushctl loop maps the API's answers onto exit codes scripts can rely on, and
// sends the token. (The API itself, with the real policy, is tested in stack and test/.)
func TestLoopExitCodes(t *testing.T) {
	var gotAuth, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/loops/secret/history":
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"error": {"code": "forbidden", "message": "principal user:dave may not read loop \"secret\"", "decision_id": "d-123"}}`))
		case "/loops/flaky/trigger":
			gotAuth = r.Header.Get("Authorization")
			body, _ := io.ReadAll(r.Body)
			gotBody = string(body)
			w.Write([]byte(`{"decision_id": "d-1", "firing": {"loop": "flaky", "scheduled_at": "2026-11-23T10:00:00Z", "status": "failed", "error": "model quota exhausted", "decision_id": "d-2"}}`))
		case "/loops":
			w.Write([]byte(`{"loops": []}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error": {"code": "not_found", "message": "loop \"nope\" is not defined"}}`))
		}
	}))
	defer srv.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := "http://" + ln.Addr().String()
	ln.Close()

	tests := []struct {
		name   string
		args   []string
		code   int
		output string // in stdout or stderr
	}{
		{"denied", []string{"loop", "history", "secret", "--url", srv.URL}, exitFailed, `may not read loop "secret" (decision d-123)`},
		{"unknown loop", []string{"loop", "trigger", "nope", "--url", srv.URL}, exitFailed, "is not defined"},
		{"firing failed", []string{"loop", "trigger", "flaky", "--url", srv.URL, "--instruction", "go", "--token", "tok-1"}, exitFailed, "error: model quota exhausted"},
		{"empty list", []string{"loop", "list", "--url", srv.URL}, exitOK, "(no loops you may read)"},
		{"unreachable", []string{"loop", "list", "--url", closed}, exitRuntime, "is lushctl run or serve running there?"},
		{"bad url", []string{"loop", "list", "--url", "localhost:8080"}, exitUsage, "give the server's address"},
		{"bad limit", []string{"loop", "history", "x", "--limit", "0", "--url", srv.URL}, exitUsage, "--limit"},
		{"bad output", []string{"loop", "list", "-o", "yaml", "--url", srv.URL}, exitUsage, "--output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := lushctl(t, "", tt.args...)
			if r.code != tt.code || !strings.Contains(r.stdout+r.stderr, tt.output) {
				t.Errorf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", r.code, tt.code, tt.output, r.stdout, r.stderr)
			}
		})
	}
	if gotAuth != "Bearer tok-1" || !strings.Contains(gotBody, `"instruction":"go"`) || !strings.Contains(gotBody, `"wait":true`) {
		t.Errorf("trigger sent Authorization %q and body %q", gotAuth, gotBody)
	}
}

// Loop times are printed in UTC, and the output says so: the server's times, whatever their zone,
// and the scheduler's own (UTC) agree with the decision log and with each other.
func TestLoopTimesInUTC(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/loops":
			w.Write([]byte(`{"loops": [{"name": "digest", "schedule": "CRON_TZ=Europe/Berlin 0 9 * * 1-5", "agent": "a", "run_as": "serviceaccount:bot",
				"next": "2026-11-25T09:00:00+01:00", "last": {"loop": "digest", "scheduled_at": "2026-11-24T09:00:00+01:00", "status": "succeeded"}}]}`))
		case "/loops/digest/history":
			w.Write([]byte(`{"loop": "digest", "firings": [{"loop": "digest", "scheduled_at": "2026-11-24T09:00:00.250+01:00", "trigger": "schedule", "status": "succeeded", "attempts": 1}]}`))
		case "/loops/digest/trigger":
			w.Write([]byte(`{"firing": {"loop": "digest", "scheduled_at": "2026-11-24T10:30:00.5+01:00", "trigger": "manual", "status": "succeeded"}}`))
		}
	}))
	defer srv.Close()
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"loop", "list"}, []string{"NEXT (UTC)", "LAST (UTC)", "2026-11-25 08:00:00", "succeeded 2026-11-24 08:00:00"}},
		{[]string{"loop", "history", "digest"}, []string{"SCHEDULED (UTC)", "2026-11-24 08:00:00.250"}},
		{[]string{"loop", "trigger", "digest"}, []string{"loop digest fired at 2026-11-24 09:30:00.500 UTC: succeeded"}},
	}
	for _, tt := range tests {
		t.Run(tt.args[1], func(t *testing.T) {
			r := lushctl(t, "", append(tt.args, "--url", srv.URL)...)
			for _, want := range tt.want {
				if r.code != 0 || !strings.Contains(r.stdout, want) {
					t.Errorf("exit %d, stdout lacks %q:\n%s\nstderr: %s", r.code, want, r.stdout, r.stderr)
				}
			}
		})
	}
}

// lushctl loop trigger says it waits for the firing only once the server accepted the trigger
// (its interim answer 102 Processing), never before a refusal. Against the real scheduler API,
// with the project's policy.
func TestLoopTriggerSaysWaitingOnceAccepted(t *testing.T) {
	ctx := context.Background()
	dir := writeFiles(t, map[string]string{
		"lush.yaml":               "project: loops-cli\nservice_accounts:\n  - name: bot\n",
		"agents/helper/spec.yaml": "name: helper\nmodel: gemini-2.5-flash\ndescription: Helps.\nacl:\n  - {principal: serviceaccount:bot, role: execute}\n",
		"loops/hourly.yaml":       "name: hourly\nschedule: \"@hourly\"\nagent: helper\nrun_as: serviceaccount:bot\ninstruction: Go.\nacl:\n  - {principal: user:alice, role: execute}\n",
	})
	res, eng := projecttest.Build(t, dir)
	log, err := decisionlog.Open(ctx, filepath.Join(t.TempDir(), "d.db"), decisionlog.CheckpointEvery(0))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	policy := enforce.NewPolicy(enforce.Config{Log: log})
	policy.Set(eng)
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	auth, err := identity.New(ctx, identity.Config{APIKeys: []identity.APIKeyConfig{
		{Name: "alice", SHA256: sum("alice-key-0123456789"), Principal: "user:alice"},
		{Name: "mallory", SHA256: sum("mallory-key-012345678"), Principal: "user:mallory"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer auth.Close()
	ran := scheduler.InvokerFunc(func(context.Context, scheduler.Run) scheduler.Outcome {
		return scheduler.Outcome{Status: scheduler.StatusSucceeded, Response: "done"}
	})
	sched, err := scheduler.New(ctx, scheduler.Config{Store: filepath.Join(t.TempDir(), "s.db"), Poll: 50 * time.Millisecond},
		scheduler.Options{Invoker: ran, Auth: auth, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	sched.Deploy(res.Manifest, res.Hash)
	sched.Start()
	defer sched.Close(ctx)
	srv := httptest.NewServer(sched.Handler())
	defer srv.Close()

	tests := []struct {
		name, key string
		code      int
		waiting   bool
	}{
		{"refused", "mallory-key-012345678", exitFailed, false},
		{"accepted", "alice-key-0123456789", exitOK, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := lushctl(t, "", "loop", "trigger", "hourly", "--url", srv.URL, "--token", tt.key)
			waiting := strings.Contains(r.stderr, "waiting for it to finish")
			if r.code != tt.code || waiting != tt.waiting {
				t.Errorf("exit %d (want %d), says it waits: %v (want %v)\nstdout: %s\nstderr: %s", r.code, tt.code,
					waiting, tt.waiting, r.stdout, r.stderr)
			}
		})
	}
}
