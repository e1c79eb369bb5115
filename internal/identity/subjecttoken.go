package identity

import (
	"fmt"
	"log/slog"
)

// SubjectToken is the bearer token a caller authenticated with, kept so that the gateway can
// exchange it (RFC 8693) for a token an upstream accepts on the caller's behalf. It is never
// passed through to an upstream, and every formatting, logging and encoding path shows
// "[redacted]", so a Caller can be printed safely.
type SubjectToken struct{ raw string }

// NewSubjectToken wraps a verified access token.
func NewSubjectToken(raw string) SubjectToken { return SubjectToken{raw: raw} }

// Reveal returns the token, for the one request that exchanges it.
func (t SubjectToken) Reveal() string { return t.raw }

// Set reports whether the caller presented a token that can be exchanged.
func (t SubjectToken) Set() bool { return t.raw != "" }

// String never shows the token.
func (t SubjectToken) String() string {
	if t.raw == "" {
		return ""
	}
	return "[redacted]"
}

// GoString keeps %#v from printing the token.
func (t SubjectToken) GoString() string { return t.String() }

// Format makes every verb print String.
func (t SubjectToken) Format(f fmt.State, _ rune) { fmt.Fprint(f, t.String()) }

// LogValue makes slog print String.
func (t SubjectToken) LogValue() slog.Value { return slog.StringValue(t.String()) }

// MarshalText is what encoders use: never the token.
func (t SubjectToken) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// withSubjectToken keeps the bearer token tok in a caller who authenticated with an access token
// of an authorization server (a JWT of a configured issuer, or an OAuth access token), for token
// exchange.
func withSubjectToken(c Caller, err *Error, tok string) (Caller, *Error) {
	if err == nil && (c.Method == MethodJWT || c.Method == "oauth") {
		c.Token = NewSubjectToken(tok)
	}
	return c, err
}
