package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// stopFunc is a stopper for tests.
type stopFunc func(ctx context.Context) error

func (f stopFunc) Shutdown(ctx context.Context) error { return f(ctx) }

// A stop that runs out of its grace with requests still running is a failure that names the
// grace (exit 1), not a command that could not run (exit 3); a clean stop is no error.
func TestShutdownExitCode(t *testing.T) {
	tests := []struct {
		name     string
		stop     stopFunc
		wantCode int
		wantMsg  string
	}{
		{name: "clean", stop: func(context.Context) error { return nil }, wantCode: exitOK},
		{name: "requests still running at the deadline", stop: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
			wantCode: exitFailed, wantMsg: "shutdown: requests still running after 10ms were cut off"},
		{name: "a part fails to close", stop: func(context.Context) error { return errors.New("close the scheduler's store: disk I/O error") },
			wantCode: exitRuntime, wantMsg: "shutdown: close the scheduler's store: disk I/O error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := shutdown(context.Background(), tt.stop, 10*time.Millisecond, slog.New(slog.DiscardHandler))
			var stderr strings.Builder
			code := exitCode(err, &stderr)
			if msg := stderr.String(); code != tt.wantCode || !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("shutdown = exit %d %q, want exit %d %q", code, msg, tt.wantCode, tt.wantMsg)
			}
		})
	}
}
