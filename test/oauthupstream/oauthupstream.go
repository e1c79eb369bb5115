// Package oauthupstream is an MCP server that requires OAuth, for tests of Lush as an OAuth
// client of upstreams: it accepts only JWT access tokens from trusted issuers (verified with
// their JWKS) whose audience is its own resource URL, answers other requests 401 with its RFC 9728
// protected resource metadata, and records the subject, act chain, audience and client of every
// tool call, so tests can check that a call carried a per-user token (and never the caller's own
// token or the gateway's).
package oauthupstream

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Issuer is an authorization server whose tokens the upstream trusts.
type Issuer struct {
	Issuer  string
	JWKSURL string
}

// Call is what the upstream saw of one tool call's token.
type Call struct {
	Tool     string
	Subject  string
	Act      []string // the act chain, outermost actor first
	Audience []string
	ClientID string
	Issuer   string
	Token    string // the token itself, so tests can scan output for it
}

// Server is a running upstream.
type Server struct {
	URL      string // the MCP endpoint, <base>/mcp: its resource URL too
	Metadata string // its protected resource metadata URL

	issuers []Issuer
	mu      sync.Mutex
	calls   []Call
	refused []string // why requests were refused
}

type ctxKey struct{}

// Start serves the upstream on loopback until t ends. It trusts tokens from issuers.
func Start(t testing.TB, issuers ...Issuer) *Server {
	t.Helper()
	s := &Server{issuers: issuers}
	mcpSrv := server.NewMCPServer("oauth-upstream", "1.0.0", server.WithToolCapabilities(false),
		server.WithToolHandlerMiddleware(func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
			return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if c, ok := ctx.Value(ctxKey{}).(Call); ok {
					c.Tool = req.Params.Name
					s.mu.Lock()
					s.calls = append(s.calls, c)
					s.mu.Unlock()
				}
				return next(ctx, req)
			}
		}))
	mcpSrv.AddTool(mcp.NewTool("whoami", mcp.WithDescription("Who the token names."), mcp.WithReadOnlyHintAnnotation(true)),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			c, _ := ctx.Value(ctxKey{}).(Call)
			return mcp.NewToolResultText("subject " + c.Subject), nil
		})
	streamable := server.NewStreamableHTTPServer(mcpSrv, server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
		if c, ok := r.Context().Value(ctxKey{}).(Call); ok {
			return context.WithValue(ctx, ctxKey{}, c)
		}
		return ctx
	}))
	ts := httptest.NewUnstartedServer(nil)
	base := "http://" + ts.Listener.Addr().String()
	s.URL, s.Metadata = base+"/mcp", base+"/.well-known/oauth-protected-resource/mcp"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, _ *http.Request) {
		var as []string
		for _, is := range s.trusted() {
			as = append(as, fmt.Sprintf("%q", is.Issuer))
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"resource":%q,"authorization_servers":[%s],"bearer_methods_supported":["header"]}`, s.URL, strings.Join(as, ","))
	})
	mux.Handle("/mcp", s.authenticate(streamable))
	ts.Config.Handler = mux
	ts.Start()
	t.Cleanup(ts.Close)
	return s
}

func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, why := s.verify(r)
		if why != "" {
			s.mu.Lock()
			s.refused = append(s.refused, why)
			s.mu.Unlock()
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer resource_metadata=%q, error="invalid_token"`, s.Metadata))
			http.Error(w, why, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, c)))
	})
}

func (s *Server) verify(r *http.Request) (Call, string) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return Call{}, "no bearer token"
	}
	unverified, err := jwt.ParseInsecure([]byte(tok))
	if err != nil {
		return Call{}, "not a JWT"
	}
	iss, _ := unverified.Issuer()
	issuers := s.trusted()
	i := slices.IndexFunc(issuers, func(is Issuer) bool { return is.Issuer == iss })
	if i < 0 {
		return Call{}, "untrusted issuer " + iss
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	set, err := jwk.Fetch(ctx, issuers[i].JWKSURL)
	if err != nil {
		return Call{}, "fetch the JWKS: " + err.Error()
	}
	t, err := jwt.Parse([]byte(tok), jwt.WithKeySet(set), jwt.WithIssuer(iss), jwt.WithAudience(s.URL), jwt.WithValidate(true))
	if err != nil {
		return Call{}, "invalid token: " + err.Error()
	}
	c := Call{Issuer: iss, Token: tok}
	c.Subject, _ = t.Subject()
	c.Audience, _ = t.Audience()
	var cid string
	if t.Get("client_id", &cid) == nil {
		c.ClientID = cid
	}
	var act map[string]any
	if t.Get("act", &act) == nil {
		for a := act; a != nil && len(c.Act) < 16; {
			sub, _ := a["sub"].(string)
			c.Act = append(c.Act, sub)
			a, _ = a["act"].(map[string]any)
		}
	}
	return c, ""
}

// Trust adds issuers whose tokens the upstream accepts (for a test that starts the upstream
// before its authorization servers, which must know its URL).
func (s *Server) Trust(issuers ...Issuer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.issuers = append(s.issuers, issuers...)
}

func (s *Server) trusted() []Issuer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.issuers)
}

// Calls returns the tool calls the upstream served, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Refused returns why requests were refused, in order.
func (s *Server) Refused() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.refused)
}
