package model

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// DefaultMaxResponseBytes bounds what a provider reads of one HTTP response, a streamed answer's
// whole stream included, when its Config leaves MaxResponseBytes at 0: far above a model's
// longest answer, far below what would exhaust the process.
const DefaultMaxResponseBytes = 16 << 20

// BoundResponses returns a copy of c (a client without a timeout when c is nil) whose response
// bodies fail, once more than max bytes (DefaultMaxResponseBytes when max is 0 or less) are read
// of one, with a *Error of provider saying so; a response that announces a larger
// Content-Length fails at its first read, before anything is downloaded. The SDKs read whole
// bodies, so without it an endpoint that is not the provider's API (or a broken proxy) could
// make the process keep anything it sends.
func BoundResponses(c *http.Client, provider string, max int64) *http.Client {
	if max <= 0 {
		max = DefaultMaxResponseBytes
	}
	out := &http.Client{}
	if c != nil {
		*out = *c
	}
	base := out.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	out.Transport = &boundedTransport{base: base, provider: provider, max: max}
	return out
}

// boundedTransport wraps each response body in a boundedBody.
type boundedTransport struct {
	base     http.RoundTripper
	provider string
	max      int64
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	b := &boundedBody{rc: resp.Body, left: t.max, max: t.max, provider: t.provider}
	b.watch, _ = req.Context().Value(watchKey{}).(*watch)
	b.over = resp.ContentLength > t.max
	resp.Body = b
	return resp, nil
}

// boundedBody reads at most max bytes of a body, then fails.
type boundedBody struct {
	rc       io.ReadCloser
	left     int64
	max      int64
	over     bool
	provider string
	watch    *watch // of the request's context, if it has one
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.over {
		return 0, b.tooLarge()
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one byte more than allowed tells a body of exactly max from a larger one
	}
	n, err := b.rc.Read(p)
	if int64(n) > b.left {
		n, b.left, b.over = int(b.left), 0, true
		return n, b.tooLarge()
	}
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }

func (b *boundedBody) tooLarge() error {
	err := &Error{Provider: b.provider, Message: fmt.Sprintf("the response is larger than %d bytes, the most read of one answer (MaxResponseBytes of the provider's configuration): no model answers this much; check that the base URL is the provider's API", b.max)}
	if b.watch != nil {
		b.watch.set(err)
	}
	return err
}

// WatchResponses returns a context whose requests through a BoundResponses client report a
// response over the bound to tooLarge, which returns that *Error (nil when none was). A
// provider asks it when a call fails: an SDK may lose the error from its chain (a scanner that
// takes the error for the end of the body, and then fails to decode what it has).
func WatchResponses(ctx context.Context) (_ context.Context, tooLarge func() *Error) {
	w := &watch{}
	return context.WithValue(ctx, watchKey{}, w), w.get
}

type watchKey struct{}

// watch holds the bound's error of one call's requests.
type watch struct {
	mu  sync.Mutex
	err *Error
}

func (w *watch) set(err *Error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
}

func (w *watch) get() *Error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
