package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serveVars are the variables serve reads; each test starts with all of them unset.
var serveVars = []string{"PORT", "LUSH_LISTEN_HOST", "LOG_LEVEL", "TRACE_BACKEND", "LUSH_PROJECT", "LUSH_BUILD", "LUSH_CONFIG",
	"LUSH_DECISION_LOG", "LUSH_TRACES_DB", "LUSH_DELEGATION_KEY", "LUSH_LIVE_WRITES", "LUSH_ALLOWED_HOSTS", "LUSH_EXT_AUTHZ_LISTEN",
	"LUSH_EXT_AUTHZ_SOCKET", "LUSH_ENVIRONMENT", "LUSH_MODEL_PROVIDER", "LUSH_SCRIPTS", "LUSH_MAX_TURNS", "LUSH_TIMEOUT",
	"LUSH_SCHEDULER_DB", "LUSH_SCHEDULER_CATCH_UP", "LUSH_SCHEDULER_LEASE", "LUSH_SCHEDULER_MAX_RUNNING", "LUSH_SCHEDULER_POLL"}

// serveEnvFor sets serve's environment to a project in a temporary directory with a dev
// gateway config and a scripts directory, plus vars; it returns the project directory.
func serveEnvFor(t *testing.T, vars map[string]string) string {
	t.Helper()
	project := t.TempDir()
	if err := os.Mkdir(filepath.Join(project, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(project, "gateway.yaml")
	if err := os.WriteFile(config, []byte("auth:\n  dev: {principal: user:dev}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range serveVars {
		t.Setenv(v, "")
	}
	t.Setenv("LUSH_PROJECT", project)
	t.Setenv("LUSH_CONFIG", config)
	for k, v := range vars {
		t.Setenv(k, strings.ReplaceAll(v, "$PROJECT", project))
	}
	return project
}

// serve keeps its state beside the decision log, so that a project mounted read-only with the
// log on a writable volume (the container) keeps every file on the volume.
func TestServeStateBesideDecisionLog(t *testing.T) {
	tests := []struct {
		name                     string
		vars                     map[string]string
		log, traces, schedulerDB string
	}{
		{"defaults: the project's .lush", nil,
			"$PROJECT/.lush/decisions.db", "$PROJECT/.lush/traces.db", "$PROJECT/.lush/scheduler.db"},
		{"a decision log elsewhere", map[string]string{"LUSH_DECISION_LOG": "/var/lib/lush/decisions.db"},
			"/var/lib/lush/decisions.db", "/var/lib/lush/traces.db", "/var/lib/lush/scheduler.db"},
		{"each named", map[string]string{"LUSH_DECISION_LOG": "/var/lib/lush/decisions.db", "LUSH_TRACES_DB": "/t/traces.db", "LUSH_SCHEDULER_DB": "/s/scheduler.db"},
			"/var/lib/lush/decisions.db", "/t/traces.db", "/s/scheduler.db"},
		{"a PostgreSQL decision log", map[string]string{"LUSH_DECISION_LOG": "postgres://lush@db/lush"},
			"postgres://lush@db/lush", "$PROJECT/.lush/traces.db", "$PROJECT/.lush/scheduler.db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			project := serveEnvFor(t, tt.vars)
			e, err := readServeEnv()
			if err != nil {
				t.Fatal(err)
			}
			expand := func(s string) string { return strings.ReplaceAll(s, "$PROJECT", project) }
			if e.cfg.DecisionLog != expand(tt.log) || e.tracesDB != expand(tt.traces) || e.scheduler == nil || e.scheduler.Store != expand(tt.schedulerDB) {
				t.Errorf("decision log %s, traces %s, scheduler %+v; want %s, %s, %s", e.cfg.DecisionLog, e.tracesDB, e.scheduler,
					expand(tt.log), expand(tt.traces), expand(tt.schedulerDB))
			}
		})
	}
}

// A store serve cannot open is exit 3 (could not run), not a usage error.
func TestServeStoreThatCannotOpen(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	serveEnvFor(t, map[string]string{"PORT": "0", "LUSH_LISTEN_HOST": "127.0.0.1", "LUSH_MODEL_PROVIDER": "scripted", "TRACE_BACKEND": "none",
		"LUSH_DECISION_LOG": filepath.Join(state, "decisions.db"), "LUSH_SCHEDULER_DB": filepath.Join(notADir, "scheduler.db")})
	r := lushctl(t, "", "serve")
	if r.code != exitRuntime || !strings.Contains(r.stderr, "open scheduler store") || strings.Contains(r.stderr, "--help") {
		t.Errorf("exit %d, want %d with the store's error and no pointer to the help\nstderr: %s", r.code, exitRuntime, r.stderr)
	}
}
