package model

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Redacted replaces an API key in the text of errors.
const Redacted = "[REDACTED]"

// Redact removes key from s. Providers pass everything a provider's answer or error says through
// it before it reaches an error, a log or a span.
func Redact(key, s string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, Redacted)
}

// Scrub wraps err with what was being done. When err's text holds key, the result carries a
// redacted copy of the text instead of err itself (its chain would still hold the key), keeping
// only a context error from the chain so that errors.Is(err, context.DeadlineExceeded) still
// works.
func Scrub(key, doing string, err error) error {
	text := err.Error()
	if key == "" || !strings.Contains(text, key) {
		return fmt.Errorf("%s: %w", doing, err)
	}
	r := &redactedError{text: doing + ": " + Redact(key, text)}
	switch {
	case errors.Is(err, context.Canceled):
		r.cause = context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		r.cause = context.DeadlineExceeded
	}
	return r
}

// redactedError is an error whose text had the API key removed.
type redactedError struct {
	text  string
	cause error // a context error, or nil
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.cause }
