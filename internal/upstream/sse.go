package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// mcp-go's client of the HTTP+SSE transport (2024-11-05) drops the requests a server sends on
// its event stream. sseRequests sits under it, in its HTTP client: it reads the event stream as it
// passes (untouched), and answers each request it carries with the handler set on it, posting the
// answer to the endpoint the stream named.

// maxSSELine bounds one line of an event stream that sseRequests keeps while reading it; a longer
// event is passed on to mcp-go but not answered.
const maxSSELine = 8 << 20

type sseRequests struct {
	next    http.RoundTripper
	headers map[string]string

	mu      sync.Mutex
	handler transport.RequestHandler
}

func (rt *sseRequests) setHandler(h transport.RequestHandler) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.handler = h
}

func (rt *sseRequests) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet {
		return resp, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return resp, nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(req.Context()))
	resp.Body = &sseTap{body: resp.Body, rt: rt, base: req.URL, ctx: ctx, cancel: cancel}
	return resp, nil
}

// sseTap reads an event stream for mcp-go and answers the requests it carries. Its context ends
// with the stream, and with it the answers still being worked out.
type sseTap struct {
	body   io.ReadCloser
	rt     *sseRequests
	base   *url.URL
	ctx    context.Context
	cancel context.CancelFunc

	line     []byte
	event    string
	data     []string
	endpoint *url.URL
	long     bool // the current line is longer than maxSSELine
}

func (t *sseTap) Read(p []byte) (int, error) {
	n, err := t.body.Read(p)
	t.feed(p[:n])
	if err != nil {
		t.cancel()
	}
	return n, err
}

func (t *sseTap) Close() error {
	t.cancel()
	return t.body.Close()
}

func (t *sseTap) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			t.keep(b)
			return
		}
		t.keep(b[:i])
		b = b[i+1:]
		line := strings.TrimSuffix(string(t.line), "\r")
		long := t.long
		t.line, t.long = t.line[:0], false
		if !long {
			t.onLine(line)
		}
	}
}

func (t *sseTap) keep(b []byte) {
	if t.long || len(t.line)+len(b) > maxSSELine {
		t.long, t.line = true, t.line[:0]
		return
	}
	t.line = append(t.line, b...)
}

func (t *sseTap) onLine(line string) {
	switch {
	case line == "":
		t.dispatch()
	case strings.HasPrefix(line, "event:"):
		t.event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
	case strings.HasPrefix(line, "data:"):
		t.data = append(t.data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
	}
}

func (t *sseTap) dispatch() {
	event, data := t.event, strings.Join(t.data, "\n")
	t.event, t.data = "", nil
	switch event {
	case "endpoint":
		if u, err := t.base.Parse(data); err == nil && u.Host == t.base.Host {
			t.endpoint = u
		}
	case "message", "":
		var msg struct {
			ID     *mcp.RequestId `json:"id"`
			Method string         `json:"method"`
		}
		if json.Unmarshal([]byte(data), &msg) != nil || msg.ID == nil || msg.Method == "" || t.endpoint == nil {
			return
		}
		var req transport.JSONRPCRequest
		if json.Unmarshal([]byte(data), &req) != nil {
			return
		}
		go t.answer(req, t.endpoint)
	}
}

// answer answers one request of the server and posts the answer to endpoint.
func (t *sseTap) answer(req transport.JSONRPCRequest, endpoint *url.URL) {
	t.rt.mu.Lock()
	h := t.rt.handler
	t.rt.mu.Unlock()
	var resp *transport.JSONRPCResponse
	if h != nil {
		resp, _ = h(t.ctx, req) // the handlers set here answer every error as a JSON-RPC error
	}
	if resp == nil {
		resp = transport.NewJSONRPCErrorResponse(req.ID, codeMethodNotFound, req.Method+": not answered by this client", nil)
	}
	body, err := json.Marshal(resp)
	if err != nil {
		return
	}
	post, err := http.NewRequestWithContext(t.ctx, http.MethodPost, endpoint.String(), bytes.NewReader(body))
	if err != nil {
		return
	}
	for k, v := range t.rt.headers {
		post.Header.Set(k, v)
	}
	post.Header.Set("Content-Type", "application/json")
	res, err := t.rt.next.RoundTrip(post)
	if err == nil {
		io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
		res.Body.Close()
	}
}
