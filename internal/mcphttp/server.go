package mcphttp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Headers of the streamable HTTP transport.
const (
	HeaderSession  = "Mcp-Session-Id"
	HeaderProtocol = "Mcp-Protocol-Version"
)

// ProtocolVersions are the MCP versions this transport speaks, newest first.
var ProtocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}

// legacyProtocol is the version of the HTTP+SSE transport.
const legacyProtocol = "2024-11-05"

// DefaultMaxBody bounds a request body.
const DefaultMaxBody = 4 << 20

// Handler gives messages their meaning.
type Handler interface {
	// Serve answers a request. Returning an *Error chooses the JSON-RPC error; any other error is
	// an internal error whose text is not shown to the client.
	Serve(ctx context.Context, req *Request) (result any, err error)
	// Notification handles a notification from the client other than notifications/cancelled,
	// which the transport handles.
	Notification(ctx context.Context, req *Request)
}

// Request is one request or notification from a client.
type Request struct {
	// Session is the request's session; nil for initialize and for stateless (2026-07-28)
	// requests, which have none.
	Session  *Session
	Endpoint string
	// Protocol is the request's protocol version: its session's, the one initialize chose, or
	// the one a stateless request names.
	Protocol string
	// Client is the client's name and version as the client reports them (unverified): from
	// the session, or from a stateless request's _meta.
	Client ClientInfo
	// LogLevel is the lowest level of the log messages a stateless request asks for ("" for
	// none: its log messages are dropped). Session-era requests leave it empty.
	LogLevel string
	ID       json.RawMessage
	Method   string
	Params   json.RawMessage
	HTTP     *http.Request

	caps      json.RawMessage // the client's capabilities
	stateless bool

	notify func(method string, params any) error
	ask    func(ctx context.Context, method string, params any) (json.RawMessage, error) // ask.go
}

// Notify sends a notification related to this request (progress, log messages) before its
// response. It fails when the client does not accept a stream or the request has finished. A
// stateless request gets only the log messages at or above the level it asked for.
func (r *Request) Notify(method string, params any) error {
	if r.notify == nil {
		return errors.New("this request cannot carry notifications")
	}
	if r.stateless && method == "notifications/message" && !r.wantsLog(params) {
		return nil
	}
	return r.notify(method, params)
}

// Stateless reports whether the request is of MCP 2026-07-28's stateless era: it has no session
// and carries its version, client and capabilities itself.
func (r *Request) Stateless() bool { return r.stateless }

// Capabilities returns the client's capabilities as the client declared them (a JSON object, or
// nil when unknown): the session's, or a stateless request's own.
func (r *Request) Capabilities() json.RawMessage {
	if r.caps == nil && r.Session != nil {
		return r.Session.Caps
	}
	return r.caps
}

// Config configures a Server.
type Config struct {
	Handler  Handler
	Sessions *Sessions
	// Endpoint names the endpoint a request is for (the agent); sessions are bound to it.
	Endpoint func(r *http.Request) string
	// Principal returns the authenticated principal of a request; sessions are bound to it.
	Principal func(r *http.Request) string
	// CheckOrigin rejects requests from unexpected hosts and origins (DNS rebinding). Nil means
	// LoopbackOrigins.
	CheckOrigin  func(r *http.Request) error
	MaxBodyBytes int64         // default DefaultMaxBody
	KeepAlive    time.Duration // comment lines on idle streams; default 15s
	// MessagesPath builds the URL a legacy SSE client posts to, for an endpoint. By default it
	// is the SSE request's path with its last element "sse" replaced by "message".
	MessagesPath func(endpoint string) string
	// MaxStreams bounds the SSE streams open at once on this server (GET streams and legacy SSE
	// streams; not the responses to POSTs): beyond it a new stream is refused with 503 and
	// Retry-After. Default DefaultMaxStreams.
	MaxStreams int
	// MaxStreamsPerSession bounds the GET streams of one session: a new one beyond it ends the
	// session's oldest (server messages go to the newest stream only). Default
	// DefaultMaxStreamsPerSession.
	MaxStreamsPerSession int
	// SessionEnded, when set, is called with a session's id once it is terminated (DELETE) on
	// this server, so that the handler lets go of what it keeps for the session.
	SessionEnded func(id string)
	// StreamAfter answers a tools/call of a 2025-11-25 session that the client lets stream and
	// that is still running after this long on a primed SSE stream (resume.go); 0 never does.
	StreamAfter time.Duration
	// PollAfter makes primed streams resumable and ends one still open after this long; the
	// request goes on and the client resumes with GET and Last-Event-ID. 0: a primed stream ends
	// with its response, or with its client, which cancels the request.
	PollAfter time.Duration
	// RetryAfter is the time a client waits before it resumes a stream (the priming event's
	// retry field). Default 1s.
	RetryAfter time.Duration
	// MaxReplayStreams bounds the resumable streams kept on this server, and ReplayTTL how long
	// one is kept after its response. Defaults DefaultMaxReplayStreams and DefaultReplayTTL.
	MaxReplayStreams int
	ReplayTTL        time.Duration
	// Stateless serves the stateless requests of MCP 2026-07-28 beside sessions: the Handler
	// then answers server/discover. Without it, such requests are answered with an
	// UnsupportedProtocolVersionError naming the session-era versions.
	Stateless bool
	Logger    *slog.Logger
}

// Defaults of Config's stream bounds. An open stream costs the server a connection: two
// goroutines and some 20-30 KiB (docs/memory.md).
const (
	DefaultMaxStreams           = 10_000
	DefaultMaxStreamsPerSession = 4
)

// Server serves one MCP endpoint family over HTTP. It is safe for concurrent use.
type Server struct {
	cfg      Config
	inflight sync.Map // session id + "\x00" + request id -> context.CancelFunc
	streams  *hub
	legacy   sync.Map // legacy SSE session id -> *legacySession
	replays  *replays // resumable response streams (resume.go)
	asks     asks     // questions to clients waiting for an answer (ask.go)
	ctx      context.Context
	stop     context.CancelFunc

	mu       sync.Mutex     // guards stopping and wg.Add
	stopping bool           // Shutdown or Close began: legacy requests are refused
	wg       sync.WaitGroup // legacy requests being served
}

// NewServer returns a server.
func NewServer(cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBody
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	if cfg.CheckOrigin == nil {
		cfg.CheckOrigin = LoopbackOrigins
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Endpoint == nil {
		cfg.Endpoint = func(*http.Request) string { return "" }
	}
	if cfg.Principal == nil {
		cfg.Principal = func(*http.Request) string { return "" }
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.MaxStreamsPerSession <= 0 {
		cfg.MaxStreamsPerSession = DefaultMaxStreamsPerSession
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	if cfg.MaxReplayStreams <= 0 {
		cfg.MaxReplayStreams = DefaultMaxReplayStreams
	}
	if cfg.ReplayTTL <= 0 {
		cfg.ReplayTTL = DefaultReplayTTL
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Server{cfg: cfg, streams: newHub(cfg.MaxStreams, cfg.MaxStreamsPerSession), ctx: ctx, stop: stop,
		replays: &replays{max: cfg.MaxReplayStreams, ttl: cfg.ReplayTTL}}
}

// ServeHTTP serves the streamable HTTP endpoint: POST (a message), GET (a stream of server
// messages for a session) and DELETE (end a session).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.CheckOrigin(r); err != nil {
		writeHTTPError(w, http.StatusForbidden, nil, Errorf(CodeInvalidRequest, "%v", err))
		return
	}
	switch r.Method {
	case http.MethodPost:
		s.post(w, r)
	case http.MethodGet:
		s.get(w, r)
	case http.MethodDelete:
		s.delete(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeHTTPError(w, http.StatusMethodNotAllowed, nil, Errorf(CodeInvalidRequest, "method %s not allowed: use POST, GET or DELETE", r.Method))
	}
}

func (s *Server) readMessage(w http.ResponseWriter, r *http.Request) (*Message, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		writeHTTPError(w, http.StatusUnsupportedMediaType, nil, Errorf(CodeInvalidRequest, "Content-Type must be application/json"))
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeHTTPError(w, http.StatusRequestEntityTooLarge, nil, Errorf(CodeInvalidRequest, "the message is larger than %d bytes", s.cfg.MaxBodyBytes))
		} else {
			writeHTTPError(w, http.StatusBadRequest, nil, Errorf(CodeParseError, "cannot read the body"))
		}
		return nil, false
	}
	m, rpcErr := parseMessage(body)
	if rpcErr != nil {
		writeHTTPError(w, http.StatusBadRequest, nil, rpcErr)
		return nil, false
	}
	return m, true
}

func (s *Server) post(w http.ResponseWriter, r *http.Request) {
	m, ok := s.readMessage(w, r)
	if !ok {
		return
	}
	endpoint := s.cfg.Endpoint(r)
	req := &Request{Endpoint: endpoint, ID: m.ID, Method: m.Method, Params: m.Params, HTTP: r}

	header := strings.TrimSpace(r.Header.Get(HeaderProtocol))
	if !sessionEra(header) || bytes.Contains(m.Params, []byte(MetaProtocolVersion)) { // else no need to read _meta
		if meta := readMeta(m.Params); statelessRequest(header, meta) {
			s.postStateless(w, r, m, req, header, meta)
			return
		}
	}
	if rpcErr := checkStandardHeaders(r, m, false); rpcErr != nil {
		writeHTTPError(w, http.StatusBadRequest, m.ID, rpcErr)
		return
	}
	if m.Method == "initialize" {
		if !m.IsRequest() {
			writeHTTPError(w, http.StatusBadRequest, m.ID, Errorf(CodeInvalidRequest, "initialize must be a request with an id"))
			return
		}
		s.initialize(w, r, req)
		return
	}
	sess, status, rpcErr := s.session(r, endpoint)
	if rpcErr != nil {
		writeHTTPError(w, status, m.ID, rpcErr)
		return
	}
	if v := r.Header.Get(HeaderProtocol); v != "" && !slices.Contains(ProtocolVersions, v) {
		writeHTTPError(w, http.StatusBadRequest, m.ID, Errorf(CodeInvalidRequest, "unsupported %s %q: this server speaks %s", HeaderProtocol, v, strings.Join(ProtocolVersions, ", ")))
		return
	}
	req.Session, req.Protocol, req.Client = sess, sess.Protocol, sess.Client

	switch {
	case m.IsNotification():
		s.notification(r.Context(), req)
		w.WriteHeader(http.StatusAccepted)
	case m.IsResponse():
		s.answer(w, sess.ID, sess.Principal, m) // the answer to a question of Ask
	default:
		s.serve(w, r, req, acceptsStream(r))
	}
}

// session verifies the request's session id.
func (s *Server) session(r *http.Request, endpoint string) (*Session, int, *Error) {
	id := r.Header.Get(HeaderSession)
	if id == "" {
		return nil, http.StatusBadRequest, Errorf(CodeInvalidRequest, "missing %s header: send initialize first, then the session id it returned", HeaderSession)
	}
	sess, err := s.cfg.Sessions.verify(id, endpoint, s.cfg.Principal(r))
	if err != nil {
		return nil, http.StatusNotFound, Errorf(CodeInvalidRequest, "%v", err)
	}
	return sess, 0, nil
}

func (s *Server) initialize(w http.ResponseWriter, r *http.Request, req *Request) {
	var p struct {
		ProtocolVersion string          `json:"protocolVersion"`
		ClientInfo      ClientInfo      `json:"clientInfo"`
		Capabilities    json.RawMessage `json:"capabilities"`
	}
	if len(req.Params) > 0 {
		if err := json.Unmarshal(req.Params, &p); err != nil {
			writeHTTPError(w, http.StatusBadRequest, req.ID, Errorf(CodeInvalidParams, "initialize params: %s", jsonProblem(err)))
			return
		}
	}
	req.Protocol = ProtocolVersions[0]
	if slices.Contains(ProtocolVersions, p.ProtocolVersion) {
		req.Protocol = p.ProtocolVersion
	}
	sess := Session{Endpoint: req.Endpoint, Principal: PrincipalDigest(s.cfg.Principal(r)), Protocol: req.Protocol, Client: p.ClientInfo}
	if len(p.Capabilities) <= 1024 {
		sess.Caps = p.Capabilities
	}
	id, err := s.cfg.Sessions.issue(sess, nonce())
	if err != nil {
		writeHTTPError(w, http.StatusInternalServerError, req.ID, Errorf(CodeInternalError, "cannot create a session"))
		return
	}
	sess.ID = id
	req.Session, req.Client, req.caps = &sess, sess.Client, p.Capabilities
	w.Header().Set(HeaderSession, id)
	s.serve(w, r, req, false)
}

func (s *Server) notification(ctx context.Context, req *Request) {
	if req.Method == "notifications/cancelled" {
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(req.Params, &p) == nil && len(p.RequestID) > 0 {
			if cancel, ok := s.inflight.LoadAndDelete(inflightKey(req.Session, p.RequestID)); ok {
				cancel.(context.CancelFunc)()
			}
		}
		return
	}
	s.cfg.Handler.Notification(ctx, req)
}

func inflightKey(sess *Session, id json.RawMessage) string {
	sid := ""
	if sess != nil {
		sid = sess.ID
	}
	return sid + "\x00" + string(id)
}

// serve runs a request and writes its response: as JSON, or as an SSE stream once the handler
// sends a notification (when the client accepts streams).
func (s *Server) serve(w http.ResponseWriter, r *http.Request, req *Request, stream bool) {
	primable := s.primable(req, stream)
	if primable && s.cfg.PollAfter > 0 {
		s.serveResumable(w, r, req)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if !req.stateless { // a stateless request is cancelled by closing its stream, not by a notification
		key := inflightKey(req.Session, req.ID)
		s.inflight.Store(key, cancel)
		defer s.inflight.Delete(key)
	}

	out := &responseStream{w: w, stream: stream, stateless: req.stateless}
	req.notify = out.notify
	if primable {
		t := time.AfterFunc(s.cfg.StreamAfter, func() { out.prime(nil, s.cfg.RetryAfter) })
		defer t.Stop()
	}
	if stream && req.Session != nil && !stateless(req.Protocol) {
		req.ask = s.asker(ctx, req.Session.ID, req.Session.Principal, out.send)
	}
	result, err := s.call(ctx, req)
	if req.stateless && err == nil {
		result, err = checkInputRequests(req, result)
	}
	out.finish(req.ID, result, err, s.cfg.Logger)
}

// call runs the handler, turning a panic into an internal error: a bad message must never crash
// the server.
func (s *Server) call(ctx context.Context, req *Request) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Logger.Error("mcp handler panic", "method", req.Method, "panic", fmt.Sprint(p))
			result, err = nil, Errorf(CodeInternalError, "internal error")
		}
	}()
	return s.cfg.Handler.Serve(ctx, req)
}

// refuseStateless answers a GET or DELETE of a stateless client: 2026-07-28 has neither (its
// notifications come on subscriptions/listen streams). It reports whether it answered.
func refuseStateless(w http.ResponseWriter, r *http.Request) bool {
	if v := strings.TrimSpace(r.Header.Get(HeaderProtocol)); sessionEra(v) {
		return false
	}
	w.Header().Set("Allow", "POST")
	writeHTTPError(w, http.StatusMethodNotAllowed, nil, Errorf(CodeInvalidRequest, "%s is not part of MCP %s: POST requests (notifications come on subscriptions/listen)", r.Method, r.Header.Get(HeaderProtocol)))
	return true
}

// postStateless serves a POST of the stateless era: checked, then served without a session.
func (s *Server) postStateless(w http.ResponseWriter, r *http.Request, m *Message, req *Request, header string, meta requestMeta) {
	if status, rpcErr := s.checkStateless(r, m, header, meta); rpcErr != nil {
		writeHTTPError(w, status, m.ID, rpcErr)
		return
	}
	req.Protocol, req.Client, req.caps, req.LogLevel, req.stateless = header, meta.client, meta.caps, meta.logLevel, true
	if m.IsNotification() {
		w.WriteHeader(http.StatusAccepted)
		if m.Method != "notifications/cancelled" { // closing a request's stream cancels it
			s.cfg.Handler.Notification(r.Context(), req)
		}
		return
	}
	if m.Method == "subscriptions/listen" {
		s.listen(w, r, req)
		return
	}
	s.serve(w, r, req, acceptsStream(r))
}

// wantsLog reports whether a stateless request asked for log messages of the level params names.
func (r *Request) wantsLog(params any) bool {
	if r.LogLevel == "" {
		return false
	}
	raw, ok := params.(json.RawMessage)
	if !ok {
		raw, _ = json.Marshal(params)
	}
	var p struct {
		Level string `json:"level"`
	}
	json.Unmarshal(raw, &p)
	level := slices.Index(logLevels, p.Level)
	return level >= 0 && level >= slices.Index(logLevels, r.LogLevel)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	if refuseStateless(w, r) {
		return
	}
	if !acceptsStream(r) {
		writeHTTPError(w, http.StatusNotAcceptable, nil, Errorf(CodeInvalidRequest, "GET opens a stream: send Accept: text/event-stream"))
		return
	}
	sess, status, rpcErr := s.session(r, s.cfg.Endpoint(r))
	if rpcErr != nil {
		writeHTTPError(w, status, nil, rpcErr)
		return
	}
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		s.resume(w, r, sess, last)
		return
	}
	s.stream(w, r, sess, false, nil)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	if refuseStateless(w, r) {
		return
	}
	sess, status, rpcErr := s.session(r, s.cfg.Endpoint(r))
	if rpcErr != nil {
		writeHTTPError(w, status, nil, rpcErr)
		return
	}
	if err := s.cfg.Sessions.terminate(sess); err != nil {
		w.Header().Set("Allow", "GET, POST")
		writeHTTPError(w, http.StatusMethodNotAllowed, nil, Errorf(CodeInvalidRequest, "%v", err))
		return
	}
	s.streams.close(sess.ID)
	if s.cfg.SessionEnded != nil {
		s.cfg.SessionEnded(sess.ID)
	}
	w.WriteHeader(http.StatusNoContent)
}

// stream holds an SSE stream open for server messages to a session until the client leaves, the
// session expires (checked at each keep-alive) or the server stops. answers marks the legacy transport's stream, which carries the answers of
// requests; first, if not nil, is written before anything else (its endpoint event).
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sess *Session, answers bool, first func(*sseWriter) error) {
	sw, ok := newSSEWriter(w)
	if !ok {
		writeHTTPError(w, http.StatusInternalServerError, nil, Errorf(CodeInternalError, "streaming is not supported here"))
		return
	}
	msgs, unregister, err := s.streams.register(sess.ID, sess.Endpoint, answers)
	switch {
	case errors.Is(err, errHubShut):
		writeStopping(w)
		return
	case err != nil:
		w.Header().Set("Retry-After", "10")
		writeHTTPError(w, http.StatusServiceUnavailable, nil, Errorf(CodeInternalError, "%v", err))
		return
	}
	defer unregister()
	sw.start(http.StatusOK)
	if first != nil {
		if err := first(sw); err != nil {
			return
		}
	}
	tick := time.NewTicker(s.cfg.KeepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case msg, open := <-msgs:
			if !open {
				return
			}
			if sw.event("message", msg) != nil {
				return
			}
		case <-tick.C:
			// A stream ends with its session (legacy sessions carry no expiry): the client's
			// next GET is answered 404 and it initializes again.
			if sess.Expires != 0 && s.cfg.Sessions.now().Unix() >= sess.Expires {
				return
			}
			if sw.comment("keep-alive") != nil {
				return
			}
		}
	}
}

// Notify sends a server notification to a session's stream on this replica. It reports
// whether a stream took it.
func (s *Server) Notify(sessionID, method string, params any) bool {
	msg, err := notification(method, params)
	if err != nil {
		return false
	}
	return s.streams.send(sessionID, msg)
}

// Broadcast sends a notification to every stream of an endpoint on this replica and returns how
// many took it.
func (s *Server) Broadcast(endpoint, method string, params any) int {
	msg, err := notification(method, params)
	if err != nil {
		return 0
	}
	return s.streams.broadcast(endpoint, msg)
}

// Shutdown ends the server's streams for a graceful stop, as http.Server.Shutdown waits for the
// requests in flight (it cannot end a stream: a stream is a request that never finishes by
// itself). The streams of the streamable HTTP transport carry only what the server sends of its
// own accord: they end at once. A legacy SSE stream carries the answers of the requests posted
// for it: it ends once they have been answered. From now on new streams and legacy requests are
// refused (503). When ctx ends first, the legacy requests still running are cancelled, every
// stream ends, and Shutdown returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.refuseLegacy()
	s.streams.shutStreams(true)
	defer s.streams.shutStreams(false)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.stop()
		return ctx.Err()
	}
}

// Close ends every stream at once, cancels the legacy requests still running and waits for them
// to finish.
func (s *Server) Close() {
	s.refuseLegacy()
	s.stop()
	s.streams.shutStreams(false)
	s.wg.Wait()
}

// refuseLegacy makes LegacyMessages refuse new requests, so that s.wg only goes down.
func (s *Server) refuseLegacy() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
}

// startLegacy counts a legacy request in, unless the server is stopping.
func (s *Server) startLegacy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.wg.Add(1)
	return true
}

// writeStopping answers a request the server refuses because it is stopping.
func writeStopping(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	writeHTTPError(w, http.StatusServiceUnavailable, nil, Errorf(CodeInternalError, "the server is shutting down: retry on another replica or once it is back"))
}

func acceptsStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

func nonce() string {
	b := make([]byte, 12)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// writeHTTPError answers with an HTTP status and a JSON-RPC error body that MCP clients read.
func writeHTTPError(w http.ResponseWriter, status int, id json.RawMessage, e *Error) {
	body, _ := response(id, nil, e)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// LoopbackOrigins is the default DNS-rebinding protection for a server on a loopback address:
// the Host header and, when present, the Origin header must name localhost, 127.0.0.1 or ::1.
// Servers reachable from elsewhere configure their own check (AllowHosts).
func LoopbackOrigins(r *http.Request) error {
	if !isLoopbackHost(r.Host) {
		return fmt.Errorf("host %q is not a loopback host; requests to this server must use localhost", r.Host)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !isLoopbackHost(u.Host) {
			return fmt.Errorf("origin %q is not allowed", o)
		}
	}
	return nil
}

// AllowHosts returns an origin check that accepts the given host names (with any port) in Host
// and Origin headers, plus loopback names.
func AllowHosts(hosts ...string) func(*http.Request) error {
	allowed := func(hostport string) bool {
		if isLoopbackHost(hostport) {
			return true
		}
		h := hostport
		if hh, _, err := net.SplitHostPort(hostport); err == nil {
			h = hh
		}
		return slices.Contains(hosts, strings.ToLower(h))
	}
	return func(r *http.Request) error {
		if !allowed(r.Host) {
			return fmt.Errorf("host %q is not allowed", r.Host)
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || !allowed(u.Host) {
				return fmt.Errorf("origin %q is not allowed", o)
			}
		}
		return nil
	}
}

func isLoopbackHost(hostport string) bool {
	h := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		h = hh
	}
	h = strings.Trim(strings.ToLower(h), "[]")
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// HostCheck is the DNS-rebinding protection for a server that clients reach under the given host
// names: LoopbackOrigins when there are none, AllowHosts otherwise.
func HostCheck(allowed []string) func(*http.Request) error {
	if len(allowed) == 0 {
		return LoopbackOrigins
	}
	return AllowHosts(allowed...)
}
