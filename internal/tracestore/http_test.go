package tracestore

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHandler(t *testing.T) {
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) {
			store := impl.open(t)
			fx := recordFixture(t, store)
			srv := httptest.NewServer(Handler(store))
			t.Cleanup(srv.Close)

			tests := []struct {
				name       string
				method     string // GET if empty
				path       string
				wantCode   int
				wantTraces []string // for a list
				wantSpans  int      // for a trace
				wantParam  string   // for a 400
			}{
				{name: "list", path: "/traces", wantCode: 200, wantTraces: []string{fx.report, fx.bob, fx.full}},
				{name: "list by agent", path: "/traces?agent=triage", wantCode: 200, wantTraces: []string{fx.bob, fx.full}},
				{name: "list by principal with a limit", path: "/traces?principal=alice&limit=1", wantCode: 200, wantTraces: []string{fx.report}},
				{name: "list since a time", path: "/traces?since=" + url.QueryEscape(t0.Add(time.Minute).Format(time.RFC3339)), wantCode: 200,
					wantTraces: []string{fx.report, fx.bob}},
				{name: "list since a duration ago", path: "/traces?since=87600h", wantCode: 200, // ten years
					wantTraces: []string{fx.report, fx.bob, fx.full}},
				{name: "list nothing", path: "/traces?agent=nobody", wantCode: 200, wantTraces: []string{}},
				{name: "get", path: "/traces/" + fx.full, wantCode: 200, wantSpans: 4},
				{name: "get a running trace", path: "/traces/" + fx.running, wantCode: 200, wantSpans: 1},
				{name: "get unknown", path: "/traces/0123456789abcdef0123456789abcdef", wantCode: 404},
				{name: "bad limit", path: "/traces?limit=ten", wantCode: 400, wantParam: "limit"},
				{name: "zero limit", path: "/traces?limit=0", wantCode: 400, wantParam: "limit"},
				{name: "limit too large", path: "/traces?limit=1001", wantCode: 400, wantParam: "limit"},
				{name: "bad since", path: "/traces?since=yesterday", wantCode: 400, wantParam: "since"},
				{name: "negative since", path: "/traces?since=-1h", wantCode: 400, wantParam: "since"},
				{name: "not GET", method: http.MethodPost, path: "/traces", wantCode: 405},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					method := tt.method
					if method == "" {
						method = http.MethodGet
					}
					req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+tt.path, nil)
					if err != nil {
						t.Fatal(err)
					}
					resp, err := srv.Client().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					if resp.StatusCode != tt.wantCode {
						t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantCode)
					}
					if tt.wantCode == 405 {
						return // the mux's own answer
					}
					if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
						t.Errorf("Content-Type %q, want application/json", ct)
					}
					var body struct {
						Traces    []Trace `json:"traces"`
						Spans     []Span  `json:"spans"`
						Error     string  `json:"error"`
						Parameter string  `json:"parameter"`
					}
					b, err := io.ReadAll(resp.Body)
					if err != nil {
						t.Fatal(err)
					}
					var raw map[string]json.RawMessage
					if err := json.Unmarshal(b, &raw); err != nil {
						t.Fatalf("body %s: %v", b, err)
					}
					if err := json.Unmarshal(b, &body); err != nil {
						t.Fatalf("body %s: %v", b, err)
					}
					switch {
					case tt.wantTraces != nil:
						if _, ok := raw["traces"]; !ok {
							t.Errorf("body %s has no traces", b)
						}
						if ids := traceIDs(body.Traces); !slices.Equal(ids, tt.wantTraces) {
							t.Errorf("traces %v, want %v", ids, tt.wantTraces)
						}
					case tt.wantCode == 200:
						if len(body.Spans) != tt.wantSpans {
							t.Errorf("%d spans, want %d", len(body.Spans), tt.wantSpans)
						}
					default:
						if body.Error == "" || body.Parameter != tt.wantParam {
							t.Errorf("error %q about parameter %q, want one about %q", body.Error, body.Parameter, tt.wantParam)
						}
						if tt.wantParam != "" && !strings.Contains(body.Error, tt.wantParam) {
							t.Errorf("error %q does not name parameter %s", body.Error, tt.wantParam)
						}
					}
				})
			}
		})
	}
}

// failingStore is a Store whose queries fail.
type failingStore struct{ *Memory }

func (failingStore) List(context.Context, Filter) ([]Trace, error) {
	return nil, errors.New("disk on fire")
}

func (failingStore) Get(context.Context, string) (*Trace, error) {
	return nil, errors.New("disk on fire")
}

func TestHandlerStoreError(t *testing.T) {
	h := Handler(failingStore{NewMemory(0)})
	for _, path := range []string{"/traces", "/traces/0123456789abcdef0123456789abcdef"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var body apiError
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 500 || !strings.Contains(body.Error, "disk on fire") {
			t.Errorf("GET %s = %d %s, want a 500 JSON error", path, rec.Code, rec.Body)
		}
	}
}
