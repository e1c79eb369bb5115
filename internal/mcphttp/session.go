package mcphttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Session is what a session id carries. It is signed, not encrypted: it holds nothing secret.
type Session struct {
	ID        string          `json:"-"`
	Endpoint  string          `json:"e"`           // the endpoint (agent) it was issued for
	Principal string          `json:"p"`           // digest of the principal id it is bound to
	Protocol  string          `json:"v"`           // negotiated protocol version
	Client    ClientInfo      `json:"c"`           // the client's name and version
	Caps      json.RawMessage `json:"k,omitempty"` // the client's capabilities
	IssuedAt  int64           `json:"i"`           // unix seconds
	Expires   int64           `json:"x"`           // unix seconds
	Nonce     string          `json:"n"`
}

// ClientInfo names an MCP client.
type ClientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Errors from verifying a session id. All of them are answered with 404, which tells an MCP
// client to start a new session. A session id issued to another principal is ErrSessionUnknown,
// whatever else is true of it: the answer must not confirm that someone else's session exists.
var (
	ErrSessionUnknown    = errors.New("unknown session: the session id is not one this gateway issued to you; initialize a new one")
	ErrSessionExpired    = errors.New("the session expired: initialize a new one")
	ErrSessionEndpoint   = errors.New("the session belongs to another endpoint")
	ErrSessionTerminated = errors.New("the session was terminated")
)

// MinKeyBytes is the shortest session key accepted.
const MinKeyBytes = 32

// Sessions issues and verifies session ids with an HMAC key shared by every replica.
type Sessions struct {
	key        []byte
	ttl        time.Duration
	now        func() time.Time
	mu         sync.Mutex
	terminated map[string]int64 // id -> expiry: replica-local (DELETE reaches one replica)
	// verified holds the ids whose signature this replica has checked, decoded, with the
	// principal digest they carry: a session's later requests skip the HMAC and the decoding
	// (the checks that depend on the request, the clock or termination still run on every
	// request). At most maxVerified entries (then it starts over): an entry is the id, its
	// decoded Session and a map slot, some 0.5-1 KiB, so at most a few MiB.
	verified map[string]*Session
}

// maxVerified bounds Sessions.verified.
const maxVerified = 4096

// NewSessions returns a session manager. Sessions live ttl from their initialize (default 24h).
func NewSessions(key []byte, ttl time.Duration) (*Sessions, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("session key: need at least %d bytes, got %d", MinKeyBytes, len(key))
	}
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	return &Sessions{key: append([]byte(nil), key...), ttl: ttl, now: time.Now, terminated: map[string]int64{},
		verified: map[string]*Session{}}, nil
}

// PrincipalDigest binds a session to a principal without writing the principal into the id.
func PrincipalDigest(principal string) string {
	sum := sha256.Sum256([]byte("lush-session-principal\x00" + principal))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

const sessionPrefix = "lush1."

func (s *Sessions) issue(sess Session, nonce string) (string, error) {
	now := s.now()
	sess.IssuedAt, sess.Expires, sess.Nonce = now.Unix(), now.Add(s.ttl).Unix(), nonce
	payload, err := json.Marshal(sess)
	if err != nil {
		return "", fmt.Errorf("issue session: %w", err)
	}
	body := sessionPrefix + base64.RawURLEncoding.EncodeToString(payload)
	return body + "." + s.sign(body), nil
}

func (s *Sessions) sign(body string) string {
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(body))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// verify checks a session id for an endpoint and principal.
func (s *Sessions) verify(id, endpoint, principal string) (*Session, error) {
	if len(id) > 4096 || !strings.HasPrefix(id, sessionPrefix) {
		return nil, ErrSessionUnknown
	}
	s.mu.Lock()
	cached := s.verified[id]
	s.mu.Unlock()
	var sess Session
	if cached != nil {
		sess = *cached
	} else {
		decoded, err := s.decode(id)
		if err != nil {
			return nil, err
		}
		sess = *decoded
		s.mu.Lock()
		if len(s.verified) >= maxVerified {
			clear(s.verified)
		}
		s.verified[decoded.ID] = decoded
		s.mu.Unlock()
	}
	switch {
	case !hmac.Equal([]byte(sess.Principal), []byte(PrincipalDigest(principal))):
		return nil, ErrSessionUnknown // first: nothing else about the session may show
	case s.now().Unix() >= sess.Expires:
		return nil, ErrSessionExpired
	case sess.Endpoint != endpoint:
		return nil, ErrSessionEndpoint
	}
	s.mu.Lock()
	_, gone := s.terminated[id]
	s.mu.Unlock()
	if gone {
		return nil, ErrSessionTerminated
	}
	return &sess, nil
}

// decode checks id's signature and decodes the session it carries.
func (s *Sessions) decode(id string) (*Session, error) {
	dot := strings.LastIndexByte(id, '.')
	if dot <= len(sessionPrefix) {
		return nil, ErrSessionUnknown
	}
	body, sig := id[:dot], id[dot+1:]
	if !hmac.Equal([]byte(sig), []byte(s.sign(body))) {
		return nil, ErrSessionUnknown
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(body, sessionPrefix))
	if err != nil {
		return nil, ErrSessionUnknown
	}
	var sess Session
	if err := json.Unmarshal(payload, &sess); err != nil {
		return nil, ErrSessionUnknown
	}
	sess.ID = strings.Clone(id) // the cache keeps it, not the request's header
	return &sess, nil
}

// terminate forgets a session on this replica.
func (s *Sessions) terminate(sess *Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().Unix()
	for id, exp := range s.terminated { // keep the set bounded by expiry
		if exp <= now {
			delete(s.terminated, id)
		}
	}
	s.terminated[sess.ID] = sess.Expires
}
