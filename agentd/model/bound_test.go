package model_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/lush-agents/lush/agentd/model"
)

// TestBoundResponses: a body of up to the bound is read whole; one byte more fails with the
// provider's *model.Error, reported to WatchResponses too; a larger Content-Length fails at the
// first read; the caller's client is not changed; 0 is the default bound.
func TestBoundResponses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if r.URL.Query().Get("announce") != "" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		w.Write([]byte(strings.Repeat("x", n)))
	}))
	t.Cleanup(srv.Close)
	mine := &http.Client{}
	tests := []struct {
		name    string
		max     int64
		query   string
		wantErr bool
	}{
		{"at the bound", 1000, "n=1000", false},
		{"a byte over", 1000, "n=1001", true},
		{"announced over", 1000, "n=5000&announce=1", true},
		{"announced at the bound", 1000, "n=1000&announce=1", false},
		{"the default", 0, "n=" + strconv.Itoa(model.DefaultMaxResponseBytes), false},
		{"over the default", 0, "n=" + strconv.Itoa(model.DefaultMaxResponseBytes+1), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := model.BoundResponses(mine, "prov", tt.max)
			ctx, tooLarge := model.WatchResponses(t.Context())
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"?"+tt.query, nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			var me *model.Error
			switch {
			case !tt.wantErr && err != nil:
				t.Fatalf("read: %v", err)
			case tt.wantErr && (!errors.As(err, &me) || me.Provider != "prov" || !strings.Contains(me.Message, "the response is larger than")):
				t.Fatalf("read: %v (%d bytes), want the bound's error", err, len(body))
			case tt.wantErr && tooLarge() != me:
				t.Errorf("WatchResponses reported %v", tooLarge())
			case !tt.wantErr && tooLarge() != nil:
				t.Errorf("WatchResponses reported %v for a body under the bound", tooLarge())
			}
			if tt.wantErr && strings.Contains(tt.query, "announce") && len(body) != 0 {
				t.Errorf("%d bytes read of a body announced over the bound", len(body))
			}
		})
	}
	if mine.Transport != nil {
		t.Error("the caller's client was changed")
	}
}
