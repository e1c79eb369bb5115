package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// 2026-07-28 has no standalone stream and no resources/subscribe: a client opts in to the
// notifications it wants (list changes, updates of named resources) with a subscriptions/listen
// request whose response stream stays open. On such a connection the supervisor keeps one open
// for as long as the connection lives, and answers resources/subscribe and resources/unsubscribe
// itself by changing the resources it names.

// maxSubscriptions bounds the resources one connection listens to.
const maxSubscriptions = 10_000

// subscriptions are the resources subscribed to on one connection.
type subscriptions struct {
	mu      sync.Mutex
	uris    map[string]struct{}
	changed chan struct{} // the listen stream must be opened again with the new set
}

func newSubscriptions() subscriptions {
	return subscriptions{uris: map[string]struct{}{}, changed: make(chan struct{}, 1)}
}

// set subscribes (on) or unsubscribes uri.
func (ss *subscriptions) set(uri string, on bool) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	_, had := ss.uris[uri]
	switch {
	case on == had:
		return nil
	case on && len(ss.uris) >= maxSubscriptions:
		return &RPCError{Code: codeInternal, Message: "resources/subscribe: this connection already listens to the most resources it may"}
	case on:
		ss.uris[uri] = struct{}{}
	default:
		delete(ss.uris, uri)
	}
	select {
	case ss.changed <- struct{}{}:
	default:
	}
	return nil
}

func (ss *subscriptions) list() []string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	uris := make([]string, 0, len(ss.uris))
	for u := range ss.uris {
		uris = append(uris, u)
	}
	slices.Sort(uris)
	return uris
}

// subscribe answers resources/subscribe or resources/unsubscribe on a 2026-07-28 connection.
func (s *Server) subscribe(c *conn, method string, params json.RawMessage) (json.RawMessage, error) {
	var p struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.URI == "" {
		return nil, &RPCError{Code: codeInvalidParams, Message: method + ": params.uri: required, a string"}
	}
	if err := c.subs.set(p.URI, method == "resources/subscribe"); err != nil {
		return nil, err
	}
	return json.RawMessage(`{}`), nil
}

// listen keeps a subscriptions/listen stream open on c until ctx ends, opened again whenever the
// subscribed resources change, and after a failure with backoff. A server that does not know the
// method is not asked again.
func (s *Server) listen(ctx context.Context, c *conn) {
	backoff := s.opts.BackoffInitial
	for {
		caps := s.Lists().Capabilities
		filter := mcp.SubscriptionFilter{ResourceSubscriptions: c.subs.list()}
		filter.ToolsListChanged = caps.Tools != nil && caps.Tools.ListChanged
		filter.PromptsListChanged = caps.Prompts != nil && caps.Prompts.ListChanged
		filter.ResourcesListChanged = caps.Resources != nil && caps.Resources.ListChanged
		if filter.IsEmpty() { // nothing to listen to, until a resource is subscribed
			select {
			case <-c.subs.changed:
				continue
			case <-ctx.Done():
				return
			}
		}
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.c.Listen(lctx, filter) }()
		var err error
		reopen := false
		select {
		case err = <-done:
		case <-c.subs.changed:
			reopen = true
		case <-ctx.Done():
		}
		cancel()
		if reopen || ctx.Err() != nil {
			<-done
			if ctx.Err() != nil {
				return
			}
			continue
		}
		if errors.Is(err, mcp.ErrMethodNotFound) {
			s.opts.Logger.Info("MCP server has no subscriptions/listen: no list or resource notifications from it", "ref", s.tool.Ref)
			return
		}
		s.opts.Logger.Warn("subscriptions/listen stream ended; opening it again", "ref", s.tool.Ref, "error", err, "in", backoff)
		select {
		case <-time.After(backoff):
		case <-c.subs.changed:
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, s.opts.BackoffMax)
	}
}

// notFoundAsError hands a 2026-07-28 "method not found" on to mcp-go's transport as the JSON-RPC
// error it is: that version answers it with HTTP 404, which the transport takes for an ended
// session (as earlier versions meant it) and reports as a failed connection.
type notFoundAsError struct{ next http.RoundTripper }

func (rt notFoundAsError) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusNotFound || req.Method != http.MethodPost ||
		!mcp.IsModernProtocol(req.Header.Get(mcp.HeaderProtocolVersion)) {
		return resp, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return resp, nil
	}
	const limit = 1 << 20 // a JSON-RPC error; anything longer is not one
	head, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		resp.Body.Close()
		return nil, err
	}
	var msg struct {
		JSONRPC string          `json:"jsonrpc"`
		Error   json.RawMessage `json:"error"`
	}
	if len(head) <= limit && json.Unmarshal(head, &msg) == nil && msg.JSONRPC == mcp.JSONRPC_VERSION && len(msg.Error) > 0 {
		resp.StatusCode, resp.Status = http.StatusOK, "200 OK"
	}
	resp.Body = readCloser{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	return resp, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}
