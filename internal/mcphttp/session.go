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

// DefaultSessionTTL is how long a session lives from its initialize unless configured.
const DefaultSessionTTL = 24 * time.Hour

// DefaultMaxTerminated bounds the sessions a replica remembers as terminated (DELETE) until
// they expire: an entry is the session's nonce and its expiry, some 50 bytes (measured), so at
// most about 5 MiB.
const DefaultMaxTerminated = 100_000

// ErrTooManyTerminated answers a DELETE when the replica already remembers the most terminated
// sessions it may: the session stays valid until it expires. It is answered 405 Method Not
// Allowed, which tells an MCP client that the server does not let it terminate sessions (the
// client forgets the session; nothing of it is held server-side).
var ErrTooManyTerminated = errors.New("this replica remembers the most terminated sessions it may until they expire: the session stays valid until it expires; forget its id")

// Sessions issues and verifies session ids with an HMAC key shared by every replica. A session
// holds no memory on the server: its id carries it (signed). What a replica remembers is
// bounded: the ids it verified recently (maxVerified), and the sessions terminated on it until
// they expire (SessionOptions.MaxTerminated).
type Sessions struct {
	key           []byte
	ttl           time.Duration
	maxTerminated int
	now           func() time.Time
	mu            sync.Mutex
	// terminated holds the sessions DELETEd on this replica (replica-local: DELETE reaches one
	// replica), by nonce, with their expiry; minExpiry is the earliest expiry in it, so that a
	// full set is swept only when something in it has expired.
	terminated map[string]int64
	minExpiry  int64
	// verified holds the ids whose signature this replica has checked, decoded, with the
	// principal digest they carry: a session's later requests skip the HMAC and the decoding
	// (the checks that depend on the request, the clock or termination still run on every
	// request). At most maxVerified entries (then it starts over): an entry is the id, its
	// decoded Session and a map slot, some 0.5-1 KiB, so at most a few MiB.
	verified map[string]*Session
}

// maxVerified bounds Sessions.verified.
const maxVerified = 4096

// SessionOptions tune NewSessions.
type SessionOptions struct {
	// MaxTerminated bounds the terminated sessions remembered until they expire; beyond it, DELETE
	// is refused (ErrTooManyTerminated). Default DefaultMaxTerminated.
	MaxTerminated int
}

// NewSessions returns a session manager. Sessions live ttl from their initialize
// (DefaultSessionTTL when 0).
func NewSessions(key []byte, ttl time.Duration, opts ...SessionOptions) (*Sessions, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("session key: need at least %d bytes, got %d", MinKeyBytes, len(key))
	}
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	maxTerminated := DefaultMaxTerminated
	for _, o := range opts {
		if o.MaxTerminated > 0 {
			maxTerminated = o.MaxTerminated
		}
	}
	return &Sessions{key: append([]byte(nil), key...), ttl: ttl, maxTerminated: maxTerminated, now: time.Now,
		terminated: map[string]int64{}, verified: map[string]*Session{}}, nil
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
	_, gone := s.terminated[sess.Nonce]
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

// terminate forgets a session on this replica until it expires. When the replica already
// remembers MaxTerminated sessions that have not expired, it refuses (ErrTooManyTerminated).
func (s *Sessions) terminate(sess *Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().Unix()
	if _, done := s.terminated[sess.Nonce]; done {
		return nil
	}
	if len(s.terminated) >= s.maxTerminated && now >= s.minExpiry { // sweep what expired
		s.minExpiry = 0
		for n, exp := range s.terminated {
			if exp <= now {
				delete(s.terminated, n)
			} else if s.minExpiry == 0 || exp < s.minExpiry {
				s.minExpiry = exp
			}
		}
	}
	if len(s.terminated) >= s.maxTerminated {
		return ErrTooManyTerminated
	}
	if len(s.terminated) == 0 || sess.Expires < s.minExpiry {
		s.minExpiry = sess.Expires
	}
	s.terminated[strings.Clone(sess.Nonce)] = sess.Expires
	return nil
}
