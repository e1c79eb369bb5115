package model_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lush-agents/lush/agentd/model"
)

// An error that holds the key loses it, but keeps what was being done and a context error;
// one without the key is wrapped as it is.
func TestScrub(t *testing.T) {
	const key = "sk-test-0123456789"
	for _, tc := range []struct {
		name     string
		err      error
		want     string
		deadline bool
	}{
		{"holds the key", errors.New("401 for key " + key), "generate: 401 for key " + model.Redacted, false},
		{"deadline with the key", fmt.Errorf("POST https://x/?key=%s: %w", key, context.DeadlineExceeded), "generate: POST https://x/?key=" + model.Redacted + ": context deadline exceeded", true},
		{"no key", fmt.Errorf("dial: %w", context.DeadlineExceeded), "generate: dial: context deadline exceeded", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := model.Scrub(key, "generate", tc.err)
			if err.Error() != tc.want || strings.Contains(err.Error(), key) {
				t.Errorf("Scrub = %q, want %q", err, tc.want)
			}
			if errors.Is(err, context.DeadlineExceeded) != tc.deadline {
				t.Errorf("errors.Is(DeadlineExceeded) = %v, want %v", !tc.deadline, tc.deadline)
			}
			var inner interface{ Unwrap() error }
			if errors.As(err, &inner) && strings.Contains(fmt.Sprint(errors.Unwrap(err)), key) {
				t.Errorf("the wrapped error still holds the key")
			}
		})
	}
	if got := model.Redact("", "text"); got != "text" {
		t.Errorf("Redact with no key = %q", got)
	}
}
