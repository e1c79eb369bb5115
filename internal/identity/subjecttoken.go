package identity

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
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
// exchange; a caller with a delegation token gets back the token of the caller it was signed for,
// when this process signed it (SubjectTokens).
func (a *Authenticator) withSubjectToken(c Caller, err *Error, tok string) (Caller, *Error) {
	switch {
	case err != nil:
	case c.Method == MethodJWT || c.Method == "oauth":
		c.Token = NewSubjectToken(tok)
	case c.Method == MethodDelegation && a.subjects != nil:
		c.Token = a.subjects.recall(c.TokenID)
	}
	return c, err
}

// maxSubjectTokens bounds the tokens SubjectTokens keeps; expired ones are dropped first.
const maxSubjectTokens = 10000

// SubjectTokens remembers, in this process, the OAuth access token of the caller each delegation
// token was signed for, by the delegation token's id, until the delegation token expires. An
// agent acting for a person (through agentd, and lush:// calls between agents) then still has the
// person's token for token exchange, and the agent chain of the delegation token for the actor
// token. The token never enters the delegation token itself; a process that did not sign it
// (another replica) has none, and token exchange denies, saying the call carries no token.
type SubjectTokens struct {
	mu  sync.Mutex
	m   map[string]subjectEntry
	now func() time.Time
}

type subjectEntry struct {
	tok SubjectToken
	exp time.Time
}

// NewSubjectTokens returns an empty store; the composition root gives it to the process's
// Signer and Authenticator (KeepSubjectTokens).
func NewSubjectTokens() *SubjectTokens {
	return &SubjectTokens{m: map[string]subjectEntry{}, now: time.Now}
}

func (s *SubjectTokens) remember(jti string, tok SubjectToken, exp time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSubjectTokens {
		now := s.now()
		for k, e := range s.m {
			if now.After(e.exp) {
				delete(s.m, k)
			}
		}
		if len(s.m) >= maxSubjectTokens {
			return // full of live entries: this delegation carries no token (exchange denies)
		}
	}
	s.m[jti] = subjectEntry{tok: tok, exp: exp}
}

func (s *SubjectTokens) recall(jti string) SubjectToken {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[jti]
	if !ok || s.now().After(e.exp) {
		delete(s.m, jti)
		return SubjectToken{}
	}
	return e.tok
}

// KeepSubjectTokens makes the signer remember the Subject of the delegations it signs in st.
// Call it before the signer is used.
func (s *Signer) KeepSubjectTokens(st *SubjectTokens) { s.subjects = st }

// KeepSubjectTokens makes the authenticator give a verified delegation token's caller the token
// st remembers for it. Call it before the authenticator is used.
func (a *Authenticator) KeepSubjectTokens(st *SubjectTokens) { a.subjects = st }
