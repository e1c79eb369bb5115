// Package vaultserver is a Vault-compatible HTTP server for tests: an
// in-process stand-in for HashiCorp Vault that implements, faithfully to
// Vault's documented HTTP API, the subset the credential broker uses, so the
// broker's tests can drive it through the real github.com/hashicorp/vault/api
// client and the same tests also pass against a real Vault dev server.
//
// Start one per test with Start; it listens on 127.0.0.1 only and is stopped
// by t.Cleanup. It implements:
//
//   - sys/health (GET, HEAD; honours sealedcode, activecode)
//   - the token store at auth/token/: lookup-self, lookup, renew-self,
//     renew, revoke-self, revoke, create, create-orphan
//   - AppRole (WithAppRole) and Kubernetes (WithKubernetes) login
//   - KV version 2 at secret/ and at WithKV2Mount mounts: data (GET, PUT/POST,
//     PATCH, DELETE), metadata (GET, LIST, PUT/POST, DELETE), delete,
//     undelete, destroy, config
//   - a database-style dynamic secrets engine at database/ (creds/ROLE,
//     roles from WithDynamicRole)
//   - sys/leases/renew, sys/leases/revoke, sys/leases/lookup (and the old
//     sys/renew, sys/revoke)
//   - ACL policies (WithPolicy, plus Vault's built-in "default" and "root")
//   - one Enterprise namespace (WithNamespace)
//
// # Behaviour taken from Vault
//
// Errors use Vault's body, {"errors":[...]}, with these messages:
//
//   - no token: 403 "permission denied"
//   - unknown, revoked or expired token: 403 "2 errors occurred:\n\t*
//     permission denied\n\t* invalid token\n\n" (Vault 1.17 and later; older
//     versions said only "permission denied")
//   - token valid but the policy does not allow the operation: 403 "1 error
//     occurred:\n\t* permission denied\n\n"
//   - path under no mount: 404 `no handler for route "PATH". route entry not
//     found.` (after the token and ACL checks, as in Vault)
//   - unknown path inside a mount: 404 "1 error occurred:\n\t* unsupported
//     path\n\n"; known path, wrong method: 405 "1 error occurred:\n\t*
//     unsupported operation\n\n"; an HTTP method Vault does not map: 405
//     with no messages
//   - a missing KV secret or version: 404 {"errors":[]}, which vault/api's
//     Logical().Read turns into (nil, nil) and KVv2.Get into an error
//     wrapping api.ErrSecretNotFound
//   - a deleted or destroyed KV version: 404 whose body carries
//     data.data=null and data.metadata, which Logical().Read returns as a
//     secret (vault/api returns 404 bodies that have data)
//   - invalid JSON: 400 "failed to parse JSON input: ..."; a body over 1 MiB:
//     413 "failed to parse JSON input: http: request body too large"
//   - sealed (SetDown): 503 "Vault is sealed"; sys/health then answers
//     {"sealed":true,...} with sealedcode (default 503) as Vault does, so
//     api.Sys().Health() (which asks for sealedcode=299) reports Sealed
//     rather than failing
//
// vault/api reports every error status as *api.ResponseError with
// StatusCode and Errors set to the messages above.
//
// Tokens get the "default" policy unless created with no_default_policy; as
// in Vault it grants lookup-self, renew-self, revoke-self and
// sys/leases/renew but not sys/leases/revoke or auth/token/create. Writes
// need "create" on a KV path that does not exist yet and "update" on one
// that does (Vault's existence check); every other write needs "update".
// Revoking or expiring a token revokes its child tokens and its leases.
// Renewals follow Vault's CalculateTTL: the new TTL is the increment (or the
// original TTL), capped at the max TTL counted from issue, with Vault's
// "TTL of ... exceeded the effective max_ttl" warning. Missing TTLs default
// to Vault's 768h system default and max.
//
// # Namespaces
//
// With WithNamespace(ns) the server models Vault Enterprise with one child
// namespace ns holding every engine, auth method and WithPolicy policy; the
// root namespace has only sys/ and the token store. A request's namespace is
// its X-Vault-Namespace header joined with its path, so /v1/ns/secret/... is
// the same as the header form. A request without the namespace lands in the
// root namespace: a token from ns is denied there (403 "1 error
// occurred:\n\t* permission denied\n\n"), and the root token gets 404 no
// handler for route. The -self token endpoints and sys/leases/* always act
// in the token's or lease's own namespace, as in Vault. Tokens and lease IDs
// minted in ns end in ".<namespace id>", like Vault's.
package vaultserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
)

// Version is the version sys/health reports.
const Version = "1.20.0-lush-test"

const (
	defaultLeaseTTL = 768 * time.Hour // Vault's system default_lease_ttl
	maxLeaseTTL     = 768 * time.Hour // Vault's system max_lease_ttl
	maxRequestSize  = 1 << 20         // bytes of request body accepted
)

// Error messages exactly as Vault writes them.
const (
	msgPermissionDenied     = "permission denied"
	msgACLDenied            = "1 error occurred:\n\t* permission denied\n\n"
	msgInvalidToken         = "2 errors occurred:\n\t* permission denied\n\t* invalid token\n\n"
	msgUnsupportedPath      = "1 error occurred:\n\t* unsupported path\n\n"
	msgUnsupportedOperation = "1 error occurred:\n\t* unsupported operation\n\n"
	msgSealed               = "Vault is sealed"
)

// Server is a running Vault-compatible test server.
type Server struct {
	httpServer *httptest.Server
	closeOnce  sync.Once
	rootToken  string
	namespace  string
	st         *state
}

// Request is one entry of the request log. It never holds a token.
type Request struct {
	Time      time.Time // server clock (including Advance)
	Method    string
	Path      string // URL path such as "/v1/secret/data/app", without the query
	Namespace string // namespace the request was served in; "" for root
	// TokenAccessor is the accessor of the token the request presented;
	// "sha256:<16 hex digits>" (a fingerprint) for a token the server does
	// not know; "" when no token was sent.
	TokenAccessor string
	Status        int
}

// Start starts a server on 127.0.0.1 and registers its shutdown with
// t.Cleanup. It fails the test if an option is invalid.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cfg := &config{}
	for _, o := range opts {
		o(cfg)
	}
	if err := cfg.validate(); err != nil {
		t.Fatalf("vaultserver: invalid options: %v", err)
	}
	st, err := newState(cfg)
	if err != nil {
		t.Fatalf("vaultserver: invalid options: %v", err)
	}
	now := st.now()
	root, _ := st.mint(tokenParams{
		ns: st.root, policies: []string{"root"}, path: "auth/token/root", displayName: "root",
	}, now)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("vaultserver: listen on 127.0.0.1: %v", err)
	}
	s := &Server{rootToken: root.id, namespace: cfg.namespace, st: st}
	s.httpServer = &httptest.Server{
		Listener: ln,
		Config:   &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second},
	}
	s.httpServer.Start()
	t.Cleanup(s.Close)
	return s
}

// Addr is the server's address, "http://127.0.0.1:PORT".
func (s *Server) Addr() string { return s.httpServer.URL }

// RootToken is a non-expiring root token (policy "root") in the root
// namespace, created at Start.
func (s *Server) RootToken() string { return s.rootToken }

// Namespace is the namespace set with WithNamespace, or "".
func (s *Server) Namespace() string { return s.namespace }

// Client returns a vault/api client for the server that authenticates with
// token (none if empty), sends the server's namespace if it has one, and
// does not retry. Environment variables such as VAULT_TOKEN,
// VAULT_NAMESPACE and VAULT_ADDR are overridden.
func (s *Server) Client(t testing.TB, token string) *api.Client {
	t.Helper()
	transport := &http.Transport{
		Proxy:               nil, // never send loopback traffic to a proxy
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
	c, err := api.NewClient(&api.Config{
		Address: s.Addr(),
		HttpClient: &http.Client{
			Transport: transport,
			// vault/api handles redirects itself, like its default client.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		MaxRetries: 0,
		Timeout:    30 * time.Second,
	})
	if err != nil {
		t.Fatalf("vaultserver: new vault client: %v", err)
	}
	t.Cleanup(transport.CloseIdleConnections)
	if token == "" {
		c.ClearToken()
	} else {
		c.SetToken(token)
	}
	if s.namespace == "" {
		c.ClearNamespace()
	} else {
		c.SetNamespace(s.namespace)
	}
	return c
}

// CreateToken mints an orphan service token directly, as if with
// "vault token create -orphan" by root: policies plus "default", a TTL of ttl
// (0 means the 768h default, or never expiring for a root token), in the
// server's namespace.
func (s *Server) CreateToken(ttl time.Duration, renewable bool, policies ...string) string {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	t, _ := s.st.mint(tokenParams{
		ns: s.st.main, policies: policies, path: "auth/token/create", displayName: "token",
		ttl: ttl, renewable: renewable,
	}, s.st.now())
	return t.id
}

// Revoke revokes token, its child tokens and its leases. Later use of it
// fails with 403. Unknown tokens are ignored.
func (s *Server) Revoke(token string) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if t := s.st.tokens[token]; t != nil {
		s.st.revokeToken(t)
	}
}

// SetDown simulates an outage: while down, every request fails with 503
// {"errors":["Vault is sealed"]} and sys/health reports sealed.
func (s *Server) SetDown(down bool) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.st.down = down
}

// Close stops the server and closes its listener, so later requests fail
// with "connection refused". It is safe to call more than once.
func (s *Server) Close() {
	s.closeOnce.Do(s.httpServer.Close)
}

// Requests returns a copy of the request log, oldest first.
func (s *Server) Requests() []Request {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return append([]Request(nil), s.st.requests...)
}

// Advance moves the server's clock forward by d; tokens and leases expire
// by this clock. The clock starts as time.Now.
func (s *Server) Advance(d time.Duration) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.st.offset += d
}

// LeaseValid reports whether leaseID names a live lease: issued, not
// revoked, not expired, and owned by a live token.
func (s *Server) LeaseValid(leaseID string) bool {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return s.st.leaseValid(s.st.leases[leaseID], s.st.now())
}

// revokeToken revokes t; its children and leases become invalid with it
// (tokenValid and leaseValid walk the ownership chain), and its leases are
// marked revoked so they stay revoked.
func (st *state) revokeToken(t *token) {
	t.revoked = true
	for _, l := range st.leases {
		if l.owner == t.id {
			l.revoked = true
		}
	}
}

// mount is a secrets engine or auth method mounted at a path.
type mount struct {
	path string // with trailing slash: "secret/", "auth/approle/"
	typ  string // reported as mount_type
	// login marks the mount's "login" path as unauthenticated.
	login bool
	// exists is the existence check deciding whether a write is a create
	// or an update; nil means writes are always updates.
	exists func(st *state, req *request) bool
	handle func(st *state, req *request) response
}

// request is a request as the engines see it.
type request struct {
	method string
	op     operation
	ns     *namespace
	path   string // relative to the namespace: "secret/data/app"
	rel    string // relative to the mount: "data/app"
	mount  *mount
	query  url.Values
	body   map[string]any
	token  *token // nil on unauthenticated paths
	now    time.Time
}

// response is what a handler produces; body nil means no body.
type response struct {
	status int
	body   any
}

// envelope is Vault's response body for successful logical requests.
type envelope struct {
	RequestID     string     `json:"request_id"`
	LeaseID       string     `json:"lease_id"`
	Renewable     bool       `json:"renewable"`
	LeaseDuration int64      `json:"lease_duration"`
	Data          any        `json:"data"`
	WrapInfo      any        `json:"wrap_info"`
	Warnings      []string   `json:"warnings"`
	Auth          *authBlock `json:"auth"`
	MountType     string     `json:"mount_type"`
}

// authBlock is the "auth" object of login, token-create and renew
// responses.
type authBlock struct {
	ClientToken    string            `json:"client_token"`
	Accessor       string            `json:"accessor"`
	Policies       []string          `json:"policies"`
	TokenPolicies  []string          `json:"token_policies"`
	Metadata       map[string]string `json:"metadata"`
	LeaseDuration  int64             `json:"lease_duration"`
	Renewable      bool              `json:"renewable"`
	EntityID       string            `json:"entity_id"`
	TokenType      string            `json:"token_type"`
	Orphan         bool              `json:"orphan"`
	MFARequirement any               `json:"mfa_requirement"`
	NumUses        int               `json:"num_uses"`
}

// reply is a 200 (or status) response carrying data.
func (req *request) reply(status int, data any, warnings []string) response {
	return response{status: status, body: req.envelope(data, warnings)}
}

func (req *request) envelope(data any, warnings []string) *envelope {
	e := &envelope{RequestID: newUUID(), Data: data, Warnings: warnings}
	if req.mount != nil {
		e.MountType = req.mount.typ
	}
	return e
}

// replyAuth is a response carrying a token.
func (req *request) replyAuth(t *token, leaseDuration time.Duration, warnings []string) response {
	e := req.envelope(nil, warnings)
	e.Auth = &authBlock{
		ClientToken:   t.id,
		Accessor:      t.accessor,
		Policies:      append([]string(nil), t.policies...),
		TokenPolicies: append([]string(nil), t.policies...),
		Metadata:      t.meta,
		LeaseDuration: int64(leaseDuration / time.Second),
		Renewable:     t.renewable,
		EntityID:      t.entityID,
		TokenType:     "service",
		Orphan:        t.parent == "",
		NumUses:       t.numUses,
	}
	return response{status: http.StatusOK, body: e}
}

func noContent() response { return response{status: http.StatusNoContent} }

// errorResponse is Vault's error body; no messages gives {"errors":[]}.
func errorResponse(status int, msgs ...string) response {
	if msgs == nil {
		msgs = []string{}
	}
	return response{status: status, body: map[string][]string{"errors": msgs}}
}

func unsupportedPath() response { return errorResponse(http.StatusNotFound, msgUnsupportedPath) }

func unsupportedOperation() response {
	return errorResponse(http.StatusMethodNotAllowed, msgUnsupportedOperation)
}

func badRequest(msg string) response { return errorResponse(http.StatusBadRequest, msg) }

// incoming is what ServeHTTP reads from the wire before taking the lock.
type incoming struct {
	method   string
	urlPath  string
	v1       bool   // the path starts with /v1/
	path     string // after /v1/
	nsHeader string
	token    string
	query    url.Values
	op       operation
	body     map[string]any
	early    *response // a protocol error to report once the state is known
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in := readRequest(w, r)
	s.st.mu.Lock()
	now := s.st.now()
	resp, ns := s.st.dispatch(in, now)
	// Encode while holding the lock: response bodies may share maps and
	// slices with the state.
	status, body := encode(resp)
	s.st.requests = append(s.st.requests, Request{
		Time:          now,
		Method:        in.method,
		Path:          redactPath(in.urlPath),
		Namespace:     ns.name(),
		TokenAccessor: s.st.accessorFor(in.token),
		Status:        status,
	})
	s.st.mu.Unlock()

	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if body != nil {
		h.Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	if body != nil && r.Method != http.MethodHead {
		_, _ = w.Write(body) // a client that went away is not our error
	}
}

// encode turns a response into its status and JSON body (nil for none).
func encode(resp response) (int, []byte) {
	if resp.body == nil {
		return resp.status, nil
	}
	b, err := json.Marshal(resp.body)
	if err != nil {
		return http.StatusInternalServerError, []byte(`{"errors":["internal error: encoding response"]}` + "\n")
	}
	return resp.status, append(b, '\n')
}

// readRequest parses the method, path, headers and JSON body the way
// Vault's HTTP layer does.
func readRequest(w http.ResponseWriter, r *http.Request) *incoming {
	in := &incoming{
		method:   r.Method,
		urlPath:  r.URL.Path,
		nsHeader: r.Header.Get("X-Vault-Namespace"),
		token:    r.Header.Get("X-Vault-Token"),
		query:    r.URL.Query(),
	}
	if in.token == "" {
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			in.token = strings.TrimSpace(v)
		}
	}
	in.path, in.v1 = strings.CutPrefix(r.URL.Path, "/v1/")
	fail := func(resp response) { in.early = &resp }

	switch r.Method {
	case http.MethodGet:
		in.op = opRead
		if list, _ := strconv.ParseBool(in.query.Get("list")); list {
			in.op = opList
		}
	case "LIST":
		in.op = opList
	case http.MethodPost, http.MethodPut:
		in.op = opUpdate
	case http.MethodDelete:
		in.op = opDelete
	case http.MethodHead:
		in.op = opHead
	case http.MethodPatch:
		in.op = opPatch
		ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil {
			fail(badRequest(err.Error()))
			return in
		}
		if ct != "application/merge-patch+json" {
			fail(errorResponse(http.StatusUnsupportedMediaType, "PATCH requires Content-Type application/merge-patch+json, provided "+ct))
			return in
		}
	default:
		fail(errorResponse(http.StatusMethodNotAllowed))
		return in
	}

	if in.op == opUpdate || in.op == opPatch {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestSize))
		dec.UseNumber()
		if err := dec.Decode(&in.body); err != nil && !errors.Is(err, io.EOF) {
			status := http.StatusBadRequest
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				status = http.StatusRequestEntityTooLarge
			}
			fail(errorResponse(status, "failed to parse JSON input: "+err.Error()))
		}
	}
	return in
}

// dispatch routes a request: sealed check, namespace, unauthenticated
// paths, token check, ACL, then the mount's handler. It returns the
// namespace the request was served in, for the log.
func (st *state) dispatch(in *incoming, now time.Time) (response, *namespace) {
	if !in.v1 {
		return errorResponse(http.StatusNotFound), st.root
	}
	full := in.path
	if h := strings.Trim(in.nsHeader, "/"); h != "" && h != "root" {
		full = h + "/" + in.path
	}
	ns, path := st.resolveNamespace(full)
	if st.down && !(ns.isRoot() && path == "sys/health") {
		return errorResponse(http.StatusServiceUnavailable, msgSealed), ns
	}
	if in.early != nil {
		return *in.early, ns
	}
	if ns.isRoot() && path == "sys/health" {
		return st.health(in, now), ns
	}
	if in.op == opHead {
		return errorResponse(http.StatusMethodNotAllowed), ns
	}
	if in.op == opList && !strings.HasSuffix(path, "/") {
		path += "/"
	}
	if (in.op == opUpdate || in.op == opPatch) && strings.HasSuffix(path, "/") {
		return badRequest("cannot write to a path ending in '/'"), ns
	}
	if strings.Contains("/"+path+"/", "/../") {
		return badRequest("path cannot contain parent references"), ns
	}

	req := &request{method: in.method, op: in.op, query: in.query, body: in.body, now: now}
	req.ns, req.path = ns, path
	req.mount, req.rel = st.mountFor(ns, path)
	if req.mount != nil && req.mount.login && req.rel == "login" {
		return req.mount.handle(st, req), ns
	}

	if in.token == "" {
		return errorResponse(http.StatusForbidden, msgPermissionDenied), ns
	}
	t := st.tokens[in.token]
	if t == nil || !st.tokenValid(t, now) {
		return errorResponse(http.StatusForbidden, msgInvalidToken), ns
	}
	req.token = t
	if ns2 := st.ownNamespace(t, ns, path, in.body); ns2 != ns {
		ns = ns2
		req.ns = ns
		req.mount, req.rel = st.mountFor(ns, path)
	}
	if t.numUses > 0 {
		// Vault counts the use before the ACL check and revokes the token
		// once the last use's request is done.
		t.numUses--
		if t.numUses == 0 {
			defer st.revokeToken(t)
		}
	}

	if req.op == opUpdate && req.mount != nil && req.mount.exists != nil && !req.mount.exists(st, req) {
		req.op = opCreate
	}
	caps := st.capabilities(t, ns, path)
	if caps&req.op.capability() == 0 {
		return errorResponse(http.StatusForbidden, msgACLDenied), ns
	}
	if req.mount == nil {
		return errorResponse(http.StatusNotFound, fmt.Sprintf("no handler for route %q. route entry not found.", path)), ns
	}
	return req.mount.handle(st, req), ns
}

// resolveNamespace splits a namespace-qualified path into its namespace and
// the path relative to it.
func (st *state) resolveNamespace(full string) (*namespace, string) {
	if st.child != nil {
		if rest, ok := strings.CutPrefix(full, st.child.path); ok {
			return st.child, rest
		}
		if full == st.child.name() {
			return st.child, ""
		}
	}
	return st.root, full
}

// ownNamespace returns the namespace Vault serves path in: the token's own
// for the -self endpoints, the lease's for sys/leases/*, otherwise ns, the
// request's.
func (st *state) ownNamespace(t *token, ns *namespace, path string, body map[string]any) *namespace {
	switch path {
	case "auth/token/lookup-self", "auth/token/renew-self", "auth/token/revoke-self":
		return t.ns
	case "sys/leases/renew", "sys/leases/revoke", "sys/leases/lookup", "sys/renew", "sys/revoke":
		if id, ok := body["lease_id"].(string); ok && st.child != nil && strings.HasSuffix(id, "."+st.child.id) {
			return st.child
		}
	}
	return ns
}

// health is sys/health.
func (st *state) health(in *incoming, now time.Time) response {
	if in.op != opRead && in.op != opHead {
		return unsupportedOperation()
	}
	param := "activecode"
	status := http.StatusOK
	if st.down {
		param, status = "sealedcode", http.StatusServiceUnavailable
	}
	if v := in.query.Get(param); v != "" {
		code, err := strconv.Atoi(v)
		if err != nil {
			return badRequest(fmt.Sprintf("bad code for '%s' parameter: %v", param, err))
		}
		status = code
	}
	mode := "disabled"
	if st.down {
		mode = "unknown"
	}
	body := map[string]any{
		"initialized":                       true,
		"sealed":                            st.down,
		"standby":                           st.down,
		"performance_standby":               false,
		"replication_performance_mode":      mode,
		"replication_dr_mode":               mode,
		"server_time_utc":                   now.Unix(),
		"version":                           Version,
		"enterprise":                        st.child != nil,
		"echo_duration_ms":                  0,
		"clock_skew_ms":                     0,
		"replication_primary_canary_age_ms": 0,
		"removed_from_cluster":              false,
	}
	if !st.down {
		body["cluster_name"] = "vault-cluster-lush-test"
		body["cluster_id"] = "5f8e2a0c-1b7d-4c3e-9a6f-7d2b8c4e1f00"
	}
	return response{status: status, body: body}
}

// redactPath hides the token in the deprecated token paths that carry one
// in the URL (auth/token/lookup/TOKEN and friends), wherever the namespace
// prefix puts them.
func redactPath(p string) string {
	for _, seg := range []string{"/auth/token/lookup/", "/auth/token/renew/", "/auth/token/revoke/", "/auth/token/revoke-orphan/"} {
		if i := strings.Index(p, seg); i >= 0 && len(p) > i+len(seg) {
			return p[:i+len(seg)] + "REDACTED"
		}
	}
	return p
}
