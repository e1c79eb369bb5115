// Package notes is a small MCP server that keeps notes per account and requires a bearer token
// on every request. It is the upstream behind mcp://notes.example.com/mcp in Lush's quickstart:
// the gateway fetches the calling principal's token and sends it as "Authorization: Bearer
// <token>", and the server answers as the account that token belongs to. Tests start it
// in-process with New and Handler, and ask Seen which accounts' credentials reached it.
//
// It serves three tools over MCP streamable HTTP at /mcp: search_notes (read), post_note (write)
// and whoami. Notes live in memory; tokens come from a file that is re-read when it changes.
//
// With Options.OAuth it also accepts OAuth access tokens (JWTs of one issuer, for this server's
// audience), as a SaaS MCP server does: the account is the token's user, and the log names the
// agents the token says act for the user (its RFC 8693 act claim), never the token. The
// quickstart's demo sends it tokens the gateway obtained by token exchange.
package notes

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/lush-agents/lush/internal/identity"
)

// Options configure a Server.
type Options struct {
	// TokensFile holds one account a line, "<account> <token>"; # starts a comment line. It is
	// re-read when it changes (looked at, at most once a second, when a request comes in).
	TokensFile string
	// Seed is each account's notes at the start. It is copied.
	Seed map[string][]string
	// Logger receives what the server has to say; nil means slog.Default(). Tokens are never logged.
	Logger *slog.Logger
	// OAuth, when set, accepts bearer JWTs it authenticates (an *identity.Authenticator with
	// one auth.jwt issuer, whose audience is this server): the account is the principal's name
	// (user:alice → alice).
	OAuth Authenticator
}

// Authenticator authenticates a request's bearer JWT: *identity.Authenticator.
type Authenticator interface {
	Authenticate(r *http.Request) (identity.Caller, error)
}

// Server is the notes MCP server. Its methods are safe for concurrent use.
type Server struct {
	log     *slog.Logger
	tokens  *tokens
	oauth   Authenticator
	mcp     *server.StreamableHTTPServer
	handler http.Handler

	mu       sync.Mutex
	notes    map[string][]string // account → its notes, oldest first
	seen     []string            // the account of each authenticated request, in order
	rejected int                 // requests answered 401
}

// accountKey is the context key under which a request carries its authenticated account.
type accountKey struct{}

// New loads the tokens file and returns a server ready to serve.
func New(opts Options) (*Server, error) {
	if opts.TokensFile == "" {
		return nil, fmt.Errorf("no tokens file given")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	toks, err := loadTokens(opts.TokensFile, log)
	if err != nil {
		return nil, fmt.Errorf("load tokens: %w", err)
	}
	s := &Server{log: log, tokens: toks, oauth: opts.OAuth, notes: map[string][]string{}}
	for account, notes := range opts.Seed {
		s.notes[account] = slices.Clone(notes)
	}
	s.mcp = server.NewStreamableHTTPServer(s.newMCPServer(),
		server.WithStreamableHTTPLogger(log),
		// The auth middleware has put the caller's account in the request's context; hand it on
		// to the context the tool handlers receive.
		server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			return context.WithValue(ctx, accountKey{}, r.Context().Value(accountKey{}))
		}),
	)
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.authenticate(s.mcp))
	s.handler = mux
	return s, nil
}

// Handler returns the HTTP handler serving MCP at /mcp.
func (s *Server) Handler() http.Handler { return s.handler }

// Close ends the server's open MCP sessions, so that long-lived streams (GET /mcp) return and
// an http.Server serving Handler can shut down.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.mcp.Shutdown(ctx); err != nil {
		s.log.Warn("notes: closing MCP sessions", "err", err)
	}
}

// Accounts returns how many accounts the tokens file currently holds.
func (s *Server) Accounts() int { return s.tokens.count() }

// Seen returns the account of every request that passed authentication, in order. It grows with
// every request: the server is meant for demos and tests, not for long service.
func (s *Server) Seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// Requests returns how many requests were rejected with 401 Unauthorized.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rejected
}

// notesOf returns a copy of an account's notes.
func (s *Server) notesOf(account string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.notes[account])
}

// authenticate lets through only requests with the bearer token of a known account, and puts
// that account in the request's context.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		account, problem := s.account(r)
		if problem != "" {
			s.reject(w, r, problem)
			return
		}
		s.mu.Lock()
		s.seen = append(s.seen, account)
		s.mu.Unlock()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), accountKey{}, account)))
	})
}

// account returns the account a request's Authorization header authenticates, or what is wrong
// with it.
func (s *Server) account(r *http.Request) (account, problem string) {
	header := r.Header.Get("Authorization")
	scheme, token, _ := strings.Cut(strings.TrimSpace(header), " ")
	token = strings.TrimSpace(token)
	switch {
	case header == "":
		return "", "missing Authorization header: send Authorization: Bearer <token>"
	case !strings.EqualFold(scheme, "Bearer") || token == "":
		return "", "the Authorization header is not a bearer token: send Authorization: Bearer <token>"
	}
	account, ok := s.tokens.account(token)
	if ok {
		return account, ""
	}
	if s.oauth != nil && strings.Count(token, ".") == 2 {
		return s.oauthAccount(r, token)
	}
	return "", "unknown bearer token"
}

// oauthAccount authenticates an OAuth access token (a JWT) and logs who it is for and which
// agents act for them.
func (s *Server) oauthAccount(r *http.Request, token string) (account, problem string) {
	caller, err := s.oauth.Authenticate(r)
	if err != nil {
		var ie *identity.Error
		if errors.As(err, &ie) {
			return "", "access token refused: " + ie.Message
		}
		return "", "access token refused"
	}
	_, account, _ = strings.Cut(caller.ID, ":")
	s.log.Info("notes: OAuth access token", "account", account, "act", actChain(token))
	return account, ""
}

// actChain lists the agents an authenticated JWT's act claim names, the one acting first
// ("agent:researcher ← user"), or "" when there is none.
func actChain(jwt string) string {
	parts := strings.Split(jwt, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	type actor struct {
		Sub string `json:"sub"`
		Act *actor `json:"act"`
	}
	var claims struct {
		Act *actor `json:"act"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	var chain []string
	for a := claims.Act; a != nil && len(chain) < 16; a = a.Act {
		chain = append(chain, a.Sub)
	}
	return strings.Join(chain, " ← ")
}

// reject answers 401 as RFC 6750 describes. The description never includes the token.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, problem string) {
	s.mu.Lock()
	s.rejected++
	s.mu.Unlock()
	s.log.Info("notes: rejected a request", "remote", r.RemoteAddr, "method", r.Method, "problem", problem)
	w.Header().Set("WWW-Authenticate", `Bearer realm="notes", error="invalid_token"`)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnauthorized)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // keep "<token>" readable
	_ = enc.Encode(map[string]string{"error": "invalid_token", "error_description": problem})
}
