package identity

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/lush-agents/lush/internal/telemetry"
)

// How failed authentications are logged: at most one line per source address and reason per
// FailureLogInterval, tracking at most failureLogKeys pairs (see telemetry.LogLimiter).
const (
	FailureLogInterval = time.Minute
	failureLogKeys     = 4096
)

// Failures reports the requests a process refuses for their credentials, so that credential
// stuffing and misconfigured clients show: each is counted in
// lush_authentication_failures_total{method,reason} and logged with its source address, at most
// one line per address and reason per FailureLogInterval (the next line says how many were held
// back). A process has one, shared by every API that authenticates (the composition root makes
// it), so that the limit holds across them. Neither the metric nor the line holds the credential
// or anything derived from it: the reason is an Error's code, the method the one it tried, and
// the line carries the Error's message, which never contains a token, key or secret.
//
// The level says how unusual a failure is: a request without credentials is Debug (a client's
// first request, a browser, a probe: normal traffic on an API reachable by anyone), an expired
// token Info (the client must refresh it), any other Warn (credentials presented and refused: a
// misconfigured client, or someone guessing).
//
// A nil *Failures reports nothing. It is safe for concurrent use.
type Failures struct {
	metrics *telemetry.Metrics
	logger  *slog.Logger
	limit   *telemetry.LogLimiter
}

// NewFailures returns a reporter counting in m and logging to logger; either may be nil.
func NewFailures(m *telemetry.Metrics, logger *slog.Logger) *Failures {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Failures{metrics: m, logger: logger, limit: telemetry.NewLogLimiter(FailureLogInterval, failureLogKeys, nil)}
}

// The method labels of failures that tried no method that can be told.
const (
	methodNone    = "none"    // no credential
	methodUnknown = "unknown" // malformed or ambiguous credentials, or an error that is not an *Error
)

// reasonOther is the reason of an error that is not an *Error with a known code.
const reasonOther = "other"

// Report counts and logs one refused request: source is its peer's address (host:port, as in
// http.Request.RemoteAddr), endpoint what it asked for (a route pattern), err why it was refused
// (an *Error gives the reason and method; any other error counts as reason "other").
func (f *Failures) Report(ctx context.Context, source, endpoint string, err error) {
	if f == nil || err == nil {
		return
	}
	reason, method, msg := reasonOther, methodUnknown, err.Error()
	var ie *Error
	if errors.As(err, &ie) {
		reason, method, msg = failureLabels(ie)
	}
	if f.metrics != nil {
		f.metrics.AuthFailures.WithLabelValues(method, reason).Inc()
	}
	level := failureLevel(reason)
	if !f.logger.Enabled(ctx, level) {
		return // nothing is tracked for lines that would not be written
	}
	addr := "unknown"
	if ip, ok := parseRemote(source); ok {
		addr = ip.String()
	}
	ok, held := f.limit.Allow(addr + "\x00" + reason)
	if !ok {
		return
	}
	f.logger.Log(ctx, level, "authentication failed", "source", addr, "endpoint", endpoint, "method", method, "reason", reason,
		"error", msg, "suppressed", held)
}

// failureLabels are the metric labels and message of e: labels from fixed vocabularies only,
// whatever e holds.
func failureLabels(e *Error) (reason, method, msg string) {
	reason, method = reasonOther, methodUnknown
	switch e.Code {
	case CodeMissingCredentials, CodeInvalidRequest, CodeInvalidToken, CodeExpiredToken, CodeUnknownAPIKey, CodeUntrustedProxy, CodeForbiddenAgent,
		CodeInsufficientScope, CodeAuthServerUnavailable:
		reason = e.Code
	}
	switch e.Method {
	case MethodJWT, MethodOAuth, MethodAPIKey, MethodProxy, MethodDelegation, MethodEnvoyJWT, MethodSPIFFE: // the methods that can fail
		method = string(e.Method)
	case "":
		if e.Code == CodeMissingCredentials {
			method = methodNone
		}
	}
	return reason, method, e.Message
}

// failureLevel is the level a failure with reason is logged at.
func failureLevel(reason string) slog.Level {
	switch reason {
	case CodeMissingCredentials:
		return slog.LevelDebug
	case CodeExpiredToken:
		return slog.LevelInfo
	}
	return slog.LevelWarn
}
