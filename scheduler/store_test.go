package scheduler

import (
	"context"
	"strings"
	"testing"
)

// The password of a PostgreSQL URL never reaches an error (errors end up in logs).
func TestStoreErrorsHideThePassword(t *testing.T) {
	for _, dsn := range []string{
		"postgres://lush:s3cr3t-pass@127.0.0.1:1/lush?connect_timeout=1", // nothing listens there
		"postgres://lush:s3cr3t-pass@127.0.0.1:99999/lush",               // not a port
		"postgresql://lush:s3cr3t-pass@[::1/lush",                        // does not parse
	} {
		_, err := openStore(context.Background(), dsn)
		if err == nil {
			t.Fatalf("openStore(%q) succeeded", dsn)
		}
		if strings.Contains(err.Error(), "s3cr3t-pass") {
			t.Errorf("the error shows the password: %v", err)
		}
		if !strings.Contains(err.Error(), "scheduler store") {
			t.Errorf("the error does not say what failed: %v", err)
		}
	}
}
