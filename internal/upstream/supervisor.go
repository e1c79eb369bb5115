package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/mcpmeta"
)

// Supervision defaults.
const (
	DefaultCallTimeout    = 60 * time.Second
	DefaultHealthInterval = 10 * time.Second
	DefaultBackoffInitial = 200 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
	DefaultPingTimeout    = 5 * time.Second
	connectTimeout        = 60 * time.Second
)

// Options tune a supervised server.
type Options struct {
	Dial           DialOptions
	CallTimeout    time.Duration // per request, unless the manifest sets one (default 60s)
	HealthInterval time.Duration // ping period (default 10s)
	// PingTimeout is how long a health check waits for its answer (default 5s). A server that
	// answers none of its requests for that long is lost; one that answers others meanwhile is
	// busy, not lost.
	PingTimeout    time.Duration
	BackoffInitial time.Duration // first restart delay (default 200ms), doubling to BackoffMax
	BackoffMax     time.Duration // default 30s
	Logger         *slog.Logger
	// OnChange is called (on the server's goroutine) when the server comes up, goes down or its
	// lists change.
	OnChange func(ref string)
	// OnResourceUpdated is called for notifications/resources/updated.
	OnResourceUpdated func(ref, uri string)
	// OnTaskStatus is called for task status notifications (notifications/tasks/status of
	// 2025-11-25, notifications/tasks of the 2026-07-28 tasks extension) with their params.
	OnTaskStatus func(ref string, params json.RawMessage)
	// OnRestart is called each time the server is started again after being lost.
	OnRestart func(ref string)
	// Label names a private server's principal in log messages.
	Label string
}

// Lists are what a server offers, as its raw JSON objects (passed through untouched).
type Lists struct {
	Capabilities mcp.ServerCapabilities
	ServerInfo   mcp.Implementation
	Protocol     string // the MCP version spoken with the server
	Tools        []json.RawMessage
	Resources    []json.RawMessage
	Templates    []json.RawMessage
	Prompts      []json.RawMessage
	// Cache holds the caching hints the server gave with each list, by list method
	// ("tools/list", "resources/list", "resources/templates/list", "prompts/list"); a list
	// without hints has no entry. The supervisor reads the lists again when the shortest TTL
	// ends.
	Cache map[string]CacheHint

	headerTools map[string]*mcp.Tool // tools with x-mcp-header arguments, by name (2026-07-28)
}

// CacheHint is what a list result says about caching it (2026-07-28: ttlMs and cacheScope).
type CacheHint struct {
	TTL    time.Duration // how long the list may be reused; 0: not without asking again
	TTLSet bool          // the server gave a TTL
	Scope  string        // "public", "private", or "" when the server named none (private)
}

// State describes a server's health.
type State struct {
	Up        bool
	Settled   bool // the first connection attempt has finished (up, or failed)
	Since     time.Time
	Restarts  int
	LastError string // why it is down, or why it went down last
	RetryIn   time.Duration
	Protocol  string // the MCP version spoken on the current (or last) connection
}

// ErrUnavailable is returned for requests while a server is down.
type ErrUnavailable struct {
	Ref     string
	Reason  string
	RetryIn time.Duration
}

func (e *ErrUnavailable) Error() string {
	msg := fmt.Sprintf("MCP server %s is unavailable", e.Ref)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.RetryIn > 0 {
		msg += fmt.Sprintf(" (retrying in %s)", e.RetryIn.Round(time.Millisecond))
	}
	return msg
}

// RPCError is a JSON-RPC error the server returned.
type RPCError struct {
	Code    int
	Message string
	Data    json.RawMessage
}

func (e *RPCError) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// Notify receives the notifications an upstream sends about one request.
type Notify func(method string, params json.RawMessage)

// Server is a supervised connection to one MCP server: it connects, keeps the server's lists,
// and restarts it with backoff when it is lost.
type Server struct {
	tool *manifest.Tool
	opts Options

	mu    sync.RWMutex
	conn  *conn
	lists Lists
	state State

	kick   chan struct{} // a request saw a transport failure: check health now
	active atomic.Int64  // requests in flight
	cancel context.CancelFunc
	done   chan struct{}
	nextID atomic.Int64
}

type conn struct {
	c        *client.Client
	version  string   // the negotiated MCP version
	inflight sync.Map // upstream progress token or request id -> Notify
	calls    calls    // the calls in flight
	asking   chan struct{}
	subs     subscriptions // 2026-07-28: the resources the listen stream asks updates of
	// answer, when set, sends the answer to a server request itself (streamable HTTP, whose
	// transport would give it 30 seconds).
	answer  func(context.Context, *transport.JSONRPCResponse)
	refresh chan struct{}
	// heard counts the messages the server sent on the connection (answers, notifications,
	// requests): the health check's evidence that a server slow to answer it is still there.
	heard atomic.Int64
}

// modern reports whether the connection speaks 2026-07-28 or later: stateless requests that
// carry their protocol metadata.
func (c *conn) modern() bool { return mcp.IsModernProtocol(c.version) }

// send sends one request on c within ctx, as the protocol version wants it (mcpmeta.Stamp). cl
// is the call it is, or nil for Lush's own requests.
func (c *conn) send(ctx context.Context, cl *call, id mcp.RequestId, method string, params json.RawMessage, tool *mcp.Tool) (*transport.JSONRPCResponse, error) {
	params, header, err := mcpmeta.Stamp(c.version, ClientInfo, requestCapabilities(ctx), method, params, tool)
	if err != nil {
		return nil, err
	}
	var p any
	if len(params) > 0 {
		p = params
	}
	resp, err := c.c.GetTransport().SendRequest(streamOf(ctx, cl), transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: id,
		Method: method, Params: p, Header: header})
	if err == nil {
		c.heard.Add(1)
	}
	return resp, err
}

// Start begins supervising the server described by t. Close stops it.
func Start(t *manifest.Tool, opts Options) *Server {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if t.TimeoutMS > 0 {
		opts.CallTimeout = time.Duration(t.TimeoutMS) * time.Millisecond
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = DefaultHealthInterval
	}
	if opts.PingTimeout <= 0 {
		opts.PingTimeout = DefaultPingTimeout
	}
	if opts.BackoffInitial <= 0 {
		opts.BackoffInitial = DefaultBackoffInitial
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = DefaultBackoffMax
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Label != "" {
		opts.Logger = opts.Logger.With("as", opts.Label)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{tool: t, opts: opts, kick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	s.state.LastError = "starting"
	go s.run(ctx)
	return s
}

// Ref is the server's tool reference.
func (s *Server) Ref() string { return s.tool.Ref }

// Tool is the manifest entry the server was started from.
func (s *Server) Tool() *manifest.Tool { return s.tool }

// Close stops the server and waits for its goroutines.
func (s *Server) Close() {
	s.cancel()
	<-s.done
}

// State returns the server's health.
func (s *Server) State() State {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.state
}

// Protocol is the MCP version spoken with the server ("" while it has never been up).
func (s *Server) Protocol() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.state.Protocol
}

// Lists returns what the server offers (empty while it has never been up).
func (s *Server) Lists() Lists {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lists
}

// WaitUp blocks until the server is up or ctx ends.
func (s *Server) WaitUp(ctx context.Context) error {
	return s.wait(ctx, func(st State) bool { return st.Up })
}

// WaitSettled blocks until the first connection attempt has finished, up or not, or ctx ends.
func (s *Server) WaitSettled(ctx context.Context) error {
	return s.wait(ctx, func(st State) bool { return st.Settled })
}

func (s *Server) wait(ctx context.Context, done func(State) bool) error {
	for {
		if done(s.State()) {
			return nil
		}
		select {
		case <-ctx.Done():
			st := s.State()
			return fmt.Errorf("MCP server %s did not come up: %s", s.tool.Ref, st.LastError)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Request sends a request and returns its raw result, untouched (an input_required result of
// 2026-07-28 included). notify, if not nil, receives the notifications the server sends about
// this request: progress for the progress token in params' _meta (the caller sets a token unique
// to the call), and log messages while it is the only request in flight. The requests the server
// sends about it (sampling, elicitation, roots) are answered by the Asker of ctx (WithAsker); with
// none, the server gets a method-not-found error. A JSON-RPC error from the server is an
// *RPCError; a server that is down is an *ErrUnavailable.
func (s *Server) Request(ctx context.Context, method string, params json.RawMessage, progressToken string, notify Notify) (json.RawMessage, error) {
	s.mu.RLock()
	c := s.conn
	st := s.state
	s.mu.RUnlock()
	if c == nil {
		return nil, &ErrUnavailable{Ref: s.tool.Ref, Reason: st.LastError, RetryIn: st.RetryIn}
	}
	s.active.Add(1)
	defer s.active.Add(-1)
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	cl := &call{ctx: ctx, asker: askerFrom(ctx), notify: notify}
	defer c.calls.add(cl)()
	idText := "lush-" + strconv.FormatInt(s.nextID.Add(1), 10)
	id := mcp.NewRequestId(idText)
	if notify != nil {
		key := progressToken
		if key == "" {
			key = idText // fmt.Sprint(id.Value()), as a notification's token is read
		}
		c.inflight.Store(key, notify)
		defer c.inflight.Delete(key)
	}
	if c.modern() && (method == string(mcp.MethodResourcesSubscribe) || method == string(mcp.MethodResourcesUnsubscribe)) {
		return s.subscribe(c, method, params)
	}
	if notify != nil { // 2026-07-28 sends log messages only when asked to; earlier versions always do
		var err error
		if params, err = mcpmeta.WithLogLevel(c.version, params, mcp.LoggingLevelDebug); err != nil {
			return nil, &RPCError{Code: codeInvalidParams, Message: method + ": " + err.Error()}
		}
	}
	var tool *mcp.Tool
	if c.modern() && method == string(mcp.MethodToolsCall) {
		tool = s.headerTool(params)
	}
	resp, err := c.send(ctx, cl, id, method, params, tool)
	if err != nil {
		if ctx.Err() != nil {
			s.cancelUpstream(c, id, ctx.Err())
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("MCP server %s did not answer %s within %s: %w", s.tool.Ref, method, s.opts.CallTimeout, context.DeadlineExceeded)
			}
			return nil, ctx.Err()
		}
		select { // the connection may be gone: check now rather than at the next ping
		case s.kick <- struct{}{}:
		default:
		}
		return nil, &ErrUnavailable{Ref: s.tool.Ref, Reason: "the connection failed during the request: " + shortErr(err)}
	}
	if resp.Error != nil {
		e := &RPCError{Code: resp.Error.Code, Message: resp.Error.Message}
		if resp.Error.Data != nil {
			e.Data, _ = json.Marshal(resp.Error.Data)
		}
		return nil, e
	}
	return resp.Result, nil
}

// ListAll pages through a list method (resources/list, prompts/list, …) with live requests and
// returns the raw items of field.
func (s *Server) ListAll(ctx context.Context, method, field string) ([]json.RawMessage, error) {
	var out []json.RawMessage
	cursor := ""
	for range 1000 {
		var params json.RawMessage
		if cursor != "" {
			params, _ = json.Marshal(map[string]string{"cursor": cursor})
		}
		res, err := s.Request(ctx, method, params, "", nil)
		if err != nil {
			return nil, err
		}
		var body map[string]json.RawMessage
		if json.Unmarshal(res, &body) != nil {
			return nil, fmt.Errorf("%s: malformed result from %s", method, s.tool.Ref)
		}
		var items []json.RawMessage
		json.Unmarshal(body[field], &items)
		out = append(out, items...)
		cursor = ""
		json.Unmarshal(body["nextCursor"], &cursor)
		if cursor == "" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("%s: more than 1000 pages from %s", method, s.tool.Ref)
}

// Notification sends a notification to the server (best effort).
func (s *Server) Notification(ctx context.Context, method string, params map[string]any) error {
	s.mu.RLock()
	c := s.conn
	s.mu.RUnlock()
	if c == nil {
		return &ErrUnavailable{Ref: s.tool.Ref}
	}
	return c.c.GetTransport().SendNotification(ctx, mcp.JSONRPCNotification{JSONRPC: mcp.JSONRPC_VERSION,
		Notification: mcp.Notification{Method: method, Params: mcp.NotificationParams{AdditionalFields: params}}})
}

// headerTool returns the definition of the tool a tools/call names when it has x-mcp-header
// arguments, which 2026-07-28 mirrors in headers.
func (s *Server) headerTool(params json.RawMessage) *mcp.Tool {
	var p struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(params, &p) != nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lists.headerTools[p.Name]
}

// cancelUpstream tells the server Lush no longer waits for request id. Over HTTP at 2026-07-28
// the end of the request's stream is the cancellation, and nothing is sent.
func (s *Server) cancelUpstream(c *conn, id mcp.RequestId, cause error) {
	if _, http := c.c.GetTransport().(transport.HTTPConnection); http && c.modern() {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c.c.GetTransport().SendNotification(ctx, mcp.JSONRPCNotification{JSONRPC: mcp.JSONRPC_VERSION,
			Notification: mcp.Notification{Method: string(mcp.MethodNotificationCancelled),
				Params: mcp.NotificationParams{AdditionalFields: map[string]any{"requestId": id.Value(), "reason": cause.Error()}}}})
	}()
}

func (s *Server) run(ctx context.Context) {
	defer close(s.done)
	backoff := s.opts.BackoffInitial
	started := false
	for {
		c, lists, err := s.connect(ctx)
		if ctx.Err() != nil {
			if c != nil {
				c.c.Close()
			}
			return
		}
		if err != nil {
			s.setDown(err.Error(), backoff)
			if !s.sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, s.opts.BackoffMax)
			continue
		}
		if started && s.opts.OnRestart != nil {
			s.opts.OnRestart(s.tool.Ref)
		}
		started = true
		s.mu.Lock()
		s.conn, s.lists = c, lists
		s.state = State{Up: true, Settled: true, Since: time.Now(), Restarts: s.state.Restarts, Protocol: c.version}
		s.mu.Unlock()
		s.changed()
		upSince := time.Now()
		stopListening := func() {}
		if c.modern() {
			lctx, cancel := context.WithCancel(ctx)
			listening := make(chan struct{})
			go func() { defer close(listening); s.listen(lctx, c) }()
			stopListening = func() { cancel(); <-listening }
		}
		reason := s.monitor(ctx, c)
		stopListening()
		s.mu.Lock()
		s.conn = nil
		s.state.Restarts++
		s.mu.Unlock()
		c.c.Close()
		if ctx.Err() != nil {
			return
		}
		if time.Since(upSince) > 2*s.opts.BackoffMax {
			backoff = s.opts.BackoffInitial // it ran well for a while: restart quickly
		}
		s.opts.Logger.Warn("MCP server lost; restarting", "ref", s.tool.Ref, "reason", reason, "in", backoff)
		s.setDown(reason, backoff)
		if !s.sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, s.opts.BackoffMax)
	}
}

func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	d += time.Duration(rand.Int64N(int64(d)/5 + 1)) // jitter, so replicas do not restart in step
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (s *Server) setDown(reason string, retry time.Duration) {
	s.mu.Lock()
	s.state.Up, s.state.Settled, s.state.LastError, s.state.RetryIn, s.state.Since = false, true, reason, retry, time.Now()
	s.mu.Unlock()
	s.changed()
}

func (s *Server) changed() {
	if s.opts.OnChange != nil {
		s.opts.OnChange(s.tool.Ref)
	}
}

// connect dials, initializes and reads the server's lists.
func (s *Server) connect(ctx context.Context) (*conn, Lists, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	dialOpts := s.opts.Dial
	dialOpts.sse = &sseRequests{working: make(chan struct{}, 2*maxAsking)}
	cl, init, err := Dial(ctx, s.tool, dialOpts)
	if err != nil {
		return nil, Lists{}, err
	}
	c := &conn{c: cl, version: init.ProtocolVersion, asking: make(chan struct{}, maxAsking), subs: newSubscriptions(), refresh: make(chan struct{}, 1)}
	cl.OnNotification(func(n mcp.JSONRPCNotification) { s.onNotification(c, n) })
	if b, ok := cl.GetTransport().(transport.BidirectionalInterface); ok {
		b.SetRequestHandler(s.serverRequests(c))
	}
	dialOpts.sse.setHandler(s.serverRequests(c))
	if h, ok := cl.GetTransport().(*transport.StreamableHTTP); ok {
		c.answer = postAnswer(s.tool.Remote.URL, dialOpts.Headers, h.GetSessionId, c.version)
	}
	lists, err := s.fetchLists(ctx, c, init)
	if err != nil {
		cl.Close()
		return nil, Lists{}, err
	}
	return c, lists, nil
}

func (s *Server) fetchLists(ctx context.Context, c *conn, init *mcp.InitializeResult) (Lists, error) {
	l := Lists{Capabilities: init.Capabilities, ServerInfo: init.ServerInfo, Protocol: c.version, Cache: map[string]CacheHint{}}
	var err error
	if init.Capabilities.Tools != nil {
		if l.Tools, err = listAll(ctx, c, "tools/list", "tools", l.Cache); err != nil {
			return l, err
		}
		if c.modern() {
			l.headerTools = headerTools(l.Tools)
		}
	}
	if init.Capabilities.Resources != nil {
		if l.Resources, err = listAll(ctx, c, "resources/list", "resources", l.Cache); err != nil {
			return l, err
		}
		if l.Templates, err = listAll(ctx, c, "resources/templates/list", "resourceTemplates", l.Cache); err != nil {
			l.Templates = nil // optional: some servers have resources but no templates
		}
	}
	if init.Capabilities.Prompts != nil {
		if l.Prompts, err = listAll(ctx, c, "prompts/list", "prompts", l.Cache); err != nil {
			return l, err
		}
	}
	return l, nil
}

// headerTools picks the tools whose arguments are annotated x-mcp-header.
func headerTools(tools []json.RawMessage) map[string]*mcp.Tool {
	out := map[string]*mcp.Tool{}
	for _, raw := range tools {
		if !bytes.Contains(raw, []byte("x-mcp-header")) {
			continue
		}
		var t mcp.Tool
		if json.Unmarshal(raw, &t) == nil && t.Name != "" {
			out[t.Name] = &t
		}
	}
	return out
}

// listAll pages through a list method and returns the raw items. The caching hints of its pages
// go to cache (the shortest TTL; private when any page is).
func listAll(ctx context.Context, c *conn, method, field string, cache map[string]CacheHint) ([]json.RawMessage, error) {
	var out []json.RawMessage
	cursor := ""
	for page := 0; page < 1000; page++ {
		var params json.RawMessage
		if cursor != "" {
			params, _ = json.Marshal(map[string]string{"cursor": cursor})
		}
		resp, err := c.send(ctx, nil, mcp.NewRequestId(fmt.Sprintf("lush-list-%s-%d", method, page)), method, params, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, resp.Error.Message)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(resp.Result, &body); err != nil {
			return nil, fmt.Errorf("%s: malformed result", method)
		}
		var items []json.RawMessage
		if raw, ok := body[field]; ok {
			if err := json.Unmarshal(raw, &items); err != nil {
				return nil, fmt.Errorf("%s: %q is not a list", method, field)
			}
		}
		out = append(out, items...)
		noteCacheHint(cache, method, body)
		cursor = ""
		if raw, ok := body["nextCursor"]; ok {
			json.Unmarshal(raw, &cursor)
		}
		if cursor == "" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("%s: more than 1000 pages", method)
}

// noteCacheHint records the ttlMs and cacheScope of one page of a list.
func noteCacheHint(cache map[string]CacheHint, method string, body map[string]json.RawMessage) {
	var ttl *int64
	var scope string
	json.Unmarshal(body["ttlMs"], &ttl)
	json.Unmarshal(body["cacheScope"], &scope)
	if ttl == nil && scope == "" {
		return
	}
	h := cache[method]
	if ttl != nil {
		if d := time.Duration(max(*ttl, 0)) * time.Millisecond; !h.TTLSet || d < h.TTL {
			h.TTL, h.TTLSet = d, true
		}
	}
	if h.Scope != string(mcp.CacheScopePrivate) && scope != "" {
		h.Scope = scope
	}
	cache[method] = h
}

// minListRefresh bounds how often a TTL makes the supervisor read a server's lists again.
const minListRefresh = time.Second

// listRefresh is when the lists should be read again: at the shortest TTL their server gave, or
// never (0).
func listRefresh(l Lists) time.Duration {
	var next time.Duration
	for _, h := range l.Cache {
		if h.TTL > 0 && (next == 0 || h.TTL < next) {
			next = h.TTL
		}
	}
	if next == 0 {
		return 0
	}
	return max(next, minListRefresh)
}

// monitor watches a live connection: pings it, refreshes lists on change or when their TTL ends,
// and returns why the connection is considered lost.
func (s *Server) monitor(ctx context.Context, c *conn) string {
	tick := time.NewTicker(s.opts.HealthInterval)
	defer tick.Stop()
	expire := time.NewTimer(time.Hour)
	expire.Stop()
	defer expire.Stop()
	scheduleRefresh := func() {
		if d := listRefresh(s.Lists()); d > 0 {
			expire.Reset(d)
		}
	}
	scheduleRefresh()
	for {
		select {
		case <-ctx.Done():
			return "stopped"
		case <-tick.C:
		case <-s.kick:
		case <-expire.C:
			if err := s.refresh(ctx, c); err != nil {
				s.opts.Logger.Warn("refresh MCP server lists", "ref", s.tool.Ref, "error", err)
			}
			scheduleRefresh()
			continue
		case <-c.refresh:
			if err := s.refresh(ctx, c); err != nil {
				s.opts.Logger.Warn("refresh MCP server lists", "ref", s.tool.Ref, "error", err)
			}
			expire.Stop()
			scheduleRefresh()
			continue
		}
		if err := s.ping(ctx, c); err != nil && ctx.Err() == nil {
			return "it stopped answering: " + shortErr(err)
		}
	}
}

// ping checks that the connection still carries messages. Any answer, even an error, means the
// server is there; only a transport failure or silence means it is gone. Silence is the
// connection's: a ping left unanswered while the server answered other requests (a busy server,
// or a starved machine) is not a lost server, whose calls in flight would fail with it.
// 2026-07-28 has no ping: server/discover is asked instead.
func (s *Server) ping(ctx context.Context, c *conn) error {
	heard := c.heard.Load()
	pctx, cancel := context.WithTimeout(ctx, s.opts.PingTimeout)
	defer cancel()
	method := string(mcp.MethodPing)
	if c.modern() {
		method = string(mcp.MethodServerDiscover)
	}
	_, err := c.send(pctx, nil, mcp.NewRequestId("lush-ping-"+strconv.FormatInt(s.nextID.Add(1), 10)), method, nil, nil)
	if err != nil && ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded) && c.heard.Load() != heard {
		s.opts.Logger.Warn("MCP server slow to answer its health check, but answering other requests", "ref", s.tool.Ref, "timeout", s.opts.PingTimeout)
		return nil
	}
	return err
}

func (s *Server) refresh(ctx context.Context, c *conn) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	s.mu.RLock()
	caps, info := s.lists.Capabilities, s.lists.ServerInfo
	s.mu.RUnlock()
	lists, err := s.fetchLists(ctx, c, &mcp.InitializeResult{Capabilities: caps, ServerInfo: info})
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.conn == c {
		s.lists = lists
	}
	s.mu.Unlock()
	s.changed()
	return nil
}

func (s *Server) onNotification(c *conn, n mcp.JSONRPCNotification) {
	c.heard.Add(1)
	params, _ := json.Marshal(n.Params.AdditionalFields)
	switch n.Method {
	case "notifications/progress":
		token := fmt.Sprint(n.Params.AdditionalFields["progressToken"])
		if v, ok := c.inflight.Load(token); ok {
			v.(Notify)(n.Method, params)
		}
	case "notifications/message":
		// Log messages carry no request id: deliver them only when the request they belong to is
		// unambiguous, never to another caller's request.
		if cl, _ := c.calls.only(); cl != nil && cl.notify != nil {
			cl.notify(n.Method, params)
		}
	case "notifications/tools/list_changed", "notifications/resources/list_changed", "notifications/prompts/list_changed":
		select {
		case c.refresh <- struct{}{}:
		default:
		}
	case "notifications/tasks/status", "notifications/tasks":
		if s.opts.OnTaskStatus != nil {
			s.opts.OnTaskStatus(s.tool.Ref, params)
		}
	case "notifications/resources/updated":
		if uri, ok := n.Params.AdditionalFields["uri"].(string); ok && s.opts.OnResourceUpdated != nil {
			s.opts.OnResourceUpdated(s.tool.Ref, uri)
		}
	}
}

func shortErr(err error) string {
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return msg
}
