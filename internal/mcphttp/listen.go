package mcphttp

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// listenTypes are the notifications a subscriptions/listen stream (MCP 2026-07-28) may carry,
// by the filter field that opts in to each: the list changes a Handler announces with
// Broadcast. Resource subscriptions (resourceSubscriptions) are not established.
var listenTypes = map[string]string{
	"toolsListChanged":     "notifications/tools/list_changed",
	"promptsListChanged":   "notifications/prompts/list_changed",
	"resourcesListChanged": "notifications/resources/list_changed",
}

// listen serves subscriptions/listen: an SSE stream that opens with
// notifications/subscriptions/acknowledged (what was established of the filter) and then carries
// the Broadcasts of the endpoint the client opted in to, each tagged with the subscription's id
// (the request's id). It lasts until the client leaves; when the server stops, it ends with the
// request's result. Listen streams count against MaxStreams.
func (s *Server) listen(w http.ResponseWriter, r *http.Request, req *Request) {
	var p struct {
		Notifications map[string]json.RawMessage `json:"notifications"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil || p.Notifications == nil {
		writeHTTPError(w, http.StatusBadRequest, req.ID, Errorf(CodeInvalidParams, `subscriptions/listen needs params {"notifications": {"toolsListChanged": true, ...}}`))
		return
	}
	established, want := map[string]any{}, map[string]bool{}
	for field, method := range listenTypes {
		var on bool
		if json.Unmarshal(p.Notifications[field], &on) == nil && on {
			established[field], want[method] = true, true
		}
	}
	msgs, unregister, err := s.streams.register("listen-"+nonce(), req.Endpoint, false)
	switch {
	case errors.Is(err, errHubShut):
		writeStopping(w)
		return
	case err != nil:
		w.Header().Set("Retry-After", "10")
		writeHTTPError(w, http.StatusServiceUnavailable, req.ID, Errorf(CodeInternalError, "%v", err))
		return
	}
	defer unregister()
	tag := map[string]any{MetaSubscriptionID: req.ID}
	sw, _ := newSSEWriter(w)
	sw.start(http.StatusOK)
	ack, _ := notification("notifications/subscriptions/acknowledged", map[string]any{"notifications": established, "_meta": tag})
	if sw.event("message", ack) != nil {
		return
	}
	tick := time.NewTicker(s.cfg.KeepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case msg, open := <-msgs:
			if !open { // the server is stopping: the result ends the subscription
				body, _ := response(req.ID, map[string]any{"resultType": "complete", "_meta": tag}, nil)
				sw.event("message", body)
				return
			}
			if tagged, ok := subscribed(msg, want, tag); ok && sw.event("message", tagged) != nil {
				return
			}
		case <-tick.C:
			if sw.comment("keep-alive") != nil {
				return
			}
		}
	}
}

// subscribed returns a broadcast notification tagged with the subscription, when the
// subscription wants its method.
func subscribed(msg []byte, want map[string]bool, tag map[string]any) ([]byte, bool) {
	var n struct {
		Method string                     `json:"method"`
		Params map[string]json.RawMessage `json:"params"`
	}
	if json.Unmarshal(msg, &n) != nil || !want[n.Method] {
		return nil, false
	}
	params := map[string]any{}
	for k, v := range n.Params {
		params[k] = v
	}
	meta := map[string]any{}
	json.Unmarshal(n.Params["_meta"], &meta)
	for k, v := range tag {
		meta[k] = v
	}
	params["_meta"] = meta
	out, err := notification(n.Method, params)
	return out, err == nil
}
