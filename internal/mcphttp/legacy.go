package mcphttp

import (
	"context"
	"crypto/hmac"
	"errors"
	"net/http"
	"strings"
)

// legacySession is a session of the HTTP+SSE transport (MCP 2024-11-05). Its stream lives on the
// replica that holds the connection, so its messages must reach that replica.
type legacySession struct {
	Session
	principal string // digest
}

// LegacySSE serves the GET stream of the HTTP+SSE transport: it creates a session and sends the
// "endpoint" event naming the URL to POST messages to.
func (s *Server) LegacySSE(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.CheckOrigin(r); err != nil {
		writeHTTPError(w, http.StatusForbidden, nil, Errorf(CodeInvalidRequest, "%v", err))
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeHTTPError(w, http.StatusMethodNotAllowed, nil, Errorf(CodeInvalidRequest, "the SSE endpoint takes GET"))
		return
	}
	endpoint := s.cfg.Endpoint(r)
	ls := &legacySession{Session: Session{ID: "sse-" + nonce() + nonce(), Endpoint: endpoint, Protocol: legacyProtocol},
		principal: PrincipalDigest(s.cfg.Principal(r))}
	s.legacy.Store(ls.ID, ls)
	defer s.legacy.Delete(ls.ID)
	path := strings.TrimSuffix(r.URL.Path, "/sse") + "/message"
	if s.cfg.MessagesPath != nil {
		path = s.cfg.MessagesPath(endpoint)
	}
	s.stream(w, r, &ls.Session, true, func(sw *sseWriter) error {
		return sw.event("endpoint", []byte(path+"?sessionId="+ls.ID))
	})
}

// errLegacyUnknown answers a message for a legacy SSE session this replica does not hold for the
// caller.
var errLegacyUnknown = errors.New("unknown SSE session: SSE sessions live on the replica holding the stream (use the streamable HTTP endpoint for sessions any replica accepts)")

// legacySession finds the legacy SSE session a message is for. Another principal's session is
// answered as one that does not exist: the answer must not confirm it does.
func (s *Server) legacySession(r *http.Request) (*legacySession, error) {
	v, ok := s.legacy.Load(r.URL.Query().Get("sessionId"))
	if !ok {
		return nil, errLegacyUnknown
	}
	ls := v.(*legacySession)
	switch {
	case !hmac.Equal([]byte(ls.principal), []byte(PrincipalDigest(s.cfg.Principal(r)))):
		return nil, errLegacyUnknown
	case ls.Endpoint != s.cfg.Endpoint(r):
		return nil, ErrSessionEndpoint
	}
	return ls, nil
}

// LegacyMessages serves POSTs of the HTTP+SSE transport: the answer goes to the session's stream
// and the POST itself is answered 202 Accepted.
func (s *Server) LegacyMessages(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.CheckOrigin(r); err != nil {
		writeHTTPError(w, http.StatusForbidden, nil, Errorf(CodeInvalidRequest, "%v", err))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeHTTPError(w, http.StatusMethodNotAllowed, nil, Errorf(CodeInvalidRequest, "the message endpoint takes POST"))
		return
	}
	ls, err := s.legacySession(r)
	if err != nil {
		writeHTTPError(w, http.StatusNotFound, nil, Errorf(CodeInvalidRequest, "%v", err))
		return
	}
	m, ok := s.readMessage(w, r)
	if !ok {
		return
	}
	req := &Request{Session: &ls.Session, Endpoint: ls.Endpoint, Protocol: ls.Protocol, ID: m.ID, Method: m.Method, Params: m.Params, HTTP: r}
	if m.IsResponse() {
		s.answer(w, ls.ID, ls.principal, m) // the answer to a question of Ask
		return
	}
	if !m.IsRequest() {
		w.WriteHeader(http.StatusAccepted)
		s.notification(r.Context(), req)
		return
	}
	if !s.startLegacy() {
		writeStopping(w)
		return
	}
	w.WriteHeader(http.StatusAccepted)
	// The request outlives this POST: run it under the server's context, answer on the stream.
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		key := inflightKey(req.Session, req.ID)
		s.inflight.Store(key, cancel)
		defer s.inflight.Delete(key)
		req.notify = func(method string, params any) error {
			if !s.Notify(ls.ID, method, params) {
				return errFinished
			}
			return nil
		}
		req.ask = s.asker(ctx, ls.ID, ls.principal, func(msg []byte) error {
			if !s.streams.send(ls.ID, msg) {
				return errors.New("the session's SSE stream is gone or not keeping up")
			}
			return nil
		})
		result, err := s.call(ctx, req)
		var rpcErr *Error
		if err != nil {
			if e, ok := err.(*Error); ok {
				rpcErr = e
			} else {
				s.cfg.Logger.Error("mcp handler failed", "error", err)
				rpcErr = Errorf(CodeInternalError, "internal error")
			}
		}
		body, merr := response(req.ID, result, rpcErr)
		if merr != nil {
			body, _ = response(req.ID, nil, Errorf(CodeInternalError, "internal error: the result cannot be encoded"))
		}
		s.streams.send(ls.ID, body)
	}()
}
