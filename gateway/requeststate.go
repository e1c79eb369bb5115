package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
)

// maxRequestState bounds a requestState the gateway reads back: anything longer is not one it
// issued.
const maxRequestState = 2048

// stateSigner signs the requestState values the gateway gives 2026-07-28 clients (the exchanges
// of exchange.go, the in-band approvals of inband.go), so that the retry that carries one back
// cannot be forged or altered. A state is its prefix, base64url(JSON of the payload), ".", and
// base64url(HMAC-SHA256 of what precedes the dot). The key is derived from the session key per
// purpose, so replicas sharing the session key accept each other's states and one purpose's
// state never verifies as another's.
type stateSigner struct{ key []byte }

func newStateSigner(sessionKey []byte, purpose string) stateSigner {
	return stateSigner{key: deriveKey(sessionKey, purpose)}
}

var errStateForged = errors.New("it is not one this gateway issued, or it was altered")

// sign encodes payload as a state with prefix.
func (s stateSigner) sign(prefix string, payload any) string {
	b, _ := json.Marshal(payload)
	body := prefix + base64.RawURLEncoding.EncodeToString(b)
	return body + "." + base64.RawURLEncoding.EncodeToString(s.mac(body))
}

// open verifies a state with prefix and decodes its payload into v. What the payload says (its
// principal, expiry…) is for the caller to check.
func (s stateSigner) open(prefix, state string, v any) error {
	if len(state) > maxRequestState || !strings.HasPrefix(state, prefix) {
		return errStateForged
	}
	dot := strings.LastIndexByte(state, '.')
	if dot <= len(prefix) {
		return errStateForged
	}
	got, err := base64.RawURLEncoding.DecodeString(state[dot+1:])
	if err != nil || !hmac.Equal(got, s.mac(state[:dot])) {
		return errStateForged
	}
	payload, err := base64.RawURLEncoding.DecodeString(state[len(prefix):dot])
	if err != nil || json.Unmarshal(payload, v) != nil {
		return errStateForged
	}
	return nil
}

func (s stateSigner) mac(body string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(body))
	return m.Sum(nil)
}
