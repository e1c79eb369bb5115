package bundlesource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/lush-agents/lush/internal/manifest"
)

const secret = "a-shared-secret-for-hs256-signing"

// testBundle writes a bundle whose revision is rev and whose data carries manifestJSON (none
// when nil), signed with key (HS256) when key is set.
func testBundle(t *testing.T, rev string, manifestJSON []byte, key string) []byte {
	t.Helper()
	data := map[string]any{"lush": map[string]any{"project": map[string]any{"name": "p"}}}
	if manifestJSON != nil {
		Embed(data, manifestJSON)
	}
	b := bundle.Bundle{Manifest: bundle.Manifest{Revision: rev, Roots: &[]string{"lush"}}, Data: data,
		Modules: []bundle.ModuleFile{{URL: "/lush/x.rego", Path: "/lush/x.rego", Raw: []byte("package lush.x\n\nallow := true\n")}}}
	if key != "" {
		if err := b.GenerateSignature(bundle.NewSigningConfig(key, "HS256", ""), "default", false); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func testManifest(t *testing.T, project string) ([]byte, string) {
	t.Helper()
	data, hash, err := manifest.Encode(&manifest.Manifest{Schema: manifest.Schema, Project: project})
	if err != nil {
		t.Fatal(err)
	}
	return data, hash
}

func TestUnpack(t *testing.T) {
	good, hash := testManifest(t, "shop")
	other, _ := testManifest(t, "other")
	tests := []struct {
		name   string
		bundle []byte
		reason string // "" for success
	}{
		{"the manifest travels in the bundle", testBundle(t, hash, good, ""), ""},
		{"no manifest", testBundle(t, hash, nil, ""), ReasonManifestMissing},
		{"a manifest of another build", testBundle(t, hash, other, ""), ReasonManifestMismatch},
		{"a revision that is not a hash", testBundle(t, "v1", good, ""), ReasonManifestMismatch},
		{"not a bundle", []byte("<html>not found</html>"), ReasonUnreadable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, got, err := Unpack(tt.bundle)
			if tt.reason == "" {
				if err != nil || got != hash || m.Project != "shop" {
					t.Fatalf("Unpack = %v, %s, %v; want project shop, %s", m, got, err, hash)
				}
				return
			}
			var r *Refused
			if !errors.As(err, &r) || r.Reason != tt.reason {
				t.Fatalf("Unpack error = %v, want a refusal for %s", err, tt.reason)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	good, hash := testManifest(t, "shop")
	keys := func(k string) *bundle.VerificationConfig {
		return bundle.NewVerificationConfig(map[string]*bundle.KeyConfig{"default": {Key: k, Algorithm: "HS256"}}, "default", "", nil)
	}
	tests := []struct {
		name   string
		bundle []byte
		ok     bool
	}{
		{"signed with the key", testBundle(t, hash, good, secret), true},
		{"signed with another key", testBundle(t, hash, good, "another-secret-of-some-length"), false},
		{"unsigned", testBundle(t, hash, good, ""), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Verify(tt.bundle, keys(secret))
			if tt.ok != (err == nil) {
				t.Fatalf("Verify = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && RefusalReason(err) != ReasonSignature {
				t.Fatalf("Verify error %v is not a signature refusal", err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // part of the error; "" for valid
	}{
		{"valid", Config{Service: "http://b:8080", Resource: "bundles/a.tar.gz", PollMin: time.Second, PollMax: 2 * time.Second}, ""},
		{"defaults", Config{Service: "https://b", Resource: "a.tar.gz"}, ""},
		{"not a URL", Config{Service: "b:8080", Resource: "a.tar.gz"}, "service"},
		{"no resource", Config{Service: "http://b"}, "resource"},
		{"sub-second", Config{Service: "http://b", Resource: "a", PollMin: 500 * time.Millisecond}, "whole seconds"},
		{"max below min", Config{Service: "http://b", Resource: "a", PollMin: 5 * time.Second, PollMax: 2 * time.Second}, "less than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}

// bundleServer serves one bundle with a content ETag (304 on If-None-Match), counting requests
// and 304s; set changes it.
type bundleServer struct {
	mu          sync.Mutex
	body        []byte
	requests    atomic.Int32
	notModified atomic.Int32
	auth        atomic.Value // the last Authorization header
}

func (s *bundleServer) set(b []byte) { s.mu.Lock(); s.body = b; s.mu.Unlock() }

func (s *bundleServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	s.auth.Store(r.Header.Get("Authorization"))
	s.mu.Lock()
	body := s.body
	s.mu.Unlock()
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:8]) + `"`
	if r.Header.Get("If-None-Match") == etag {
		s.notModified.Add(1)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "application/gzip")
	w.Write(body)
}

// TestSourcePolls: the source gets the bundle, is answered 304 while it does not change (no
// update), gets the new one when it changes, and sends the bearer token from the file.
func TestSourcePolls(t *testing.T) {
	a, hashA := testManifest(t, "a")
	b, hashB := testManifest(t, "b")
	srv := &bundleServer{}
	srv.set(testBundle(t, hashA, a, ""))
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("bundle-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := New(Config{Service: hs.URL, Resource: "/bundles/app.tar.gz", TokenFile: tokenFile, PollMin: time.Second, PollMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if src.URL() != hs.URL+"/bundles/app.tar.gz" {
		t.Errorf("URL = %s", src.URL())
	}
	updates := make(chan Update, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx, func(_ context.Context, u Update) { updates <- u }) }()
	t.Cleanup(func() { cancel(); <-done })

	revision := func(u Update) string {
		t.Helper()
		if u.Err != nil {
			t.Fatalf("update: %v", u.Err)
		}
		_, hash, err := Unpack(u.Bundle)
		if err != nil {
			t.Fatal(err)
		}
		return hash
	}
	if got := revision(<-updates); got != hashA {
		t.Fatalf("first update is %s, want %s", got, hashA)
	}
	for srv.notModified.Load() == 0 { // the next poll is answered 304, which is no update
		select {
		case u := <-updates:
			t.Fatalf("an update while the bundle did not change: %+v", u)
		case <-time.After(50 * time.Millisecond):
		}
	}
	srv.set(testBundle(t, hashB, b, ""))
	if got := revision(<-updates); got != hashB {
		t.Fatalf("second update is %s, want %s", got, hashB)
	}
	if got, _ := srv.auth.Load().(string); got != "Bearer bundle-token" {
		t.Errorf("Authorization = %q, want the token from the file", got)
	}
}

// The bundle's URL, which logs and the decision log show, never carries the service's password.
func TestSourceURLRedacted(t *testing.T) {
	src, err := New(Config{Service: "https://ci:s3cret@bundles.example.com/", Resource: "/bundles/app.tar.gz"})
	if err != nil {
		t.Fatal(err)
	}
	if got := src.URL(); strings.Contains(got, "s3cret") || !strings.HasSuffix(got, "@bundles.example.com/bundles/app.tar.gz") {
		t.Errorf("URL() = %s", got)
	}
}

// TestSourceFailure: a server error is handed over as an error naming the status, not a refusal.
func TestSourceFailure(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(hs.Close)
	src, err := New(Config{Service: hs.URL, Resource: "missing.tar.gz", PollMin: time.Second, PollMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	updates := make(chan Update, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx, func(_ context.Context, u Update) { updates <- u }) }()
	t.Cleanup(func() { cancel(); <-done })
	u := <-updates
	if u.Err == nil || !strings.Contains(u.Err.Error(), "HTTP 404") || RefusalReason(u.Err) != "" {
		t.Fatalf("update = %+v, want an HTTP 404 failure that is not a refusal", u)
	}
}

func TestPublishDir(t *testing.T) {
	dir := t.TempDir()
	path, err := PublishDir(dir, "bundles/app.tar.gz", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "bundles", "app.tar.gz") {
		t.Errorf("path = %s", path)
	}
	if _, err := PublishDir(dir, "bundles/app.tar.gz", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "two" {
		t.Errorf("content = %q, want the second publish", got)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "bundles"))
	if len(entries) != 1 {
		t.Errorf("the directory holds %d files, want only the bundle (no temporary file left)", len(entries))
	}
	for _, bad := range []string{"../escape.tar.gz", "", "/"} {
		if _, err := PublishDir(dir, bad, []byte("x")); err == nil {
			t.Errorf("PublishDir(%q) succeeded, want an error", bad)
		}
	}
}

func TestPublishHTTP(t *testing.T) {
	var got []byte
	var auth string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			http.Error(w, "PUT only", http.StatusMethodNotAllowed)
			return
		}
		auth = r.Header.Get("Authorization")
		if auth != "Bearer upload-token" {
			http.Error(w, "who are you", http.StatusForbidden)
			return
		}
		buf := new(bytes.Buffer)
		buf.ReadFrom(r.Body)
		got = buf.Bytes()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(hs.Close)
	ctx := context.Background()
	if err := PublishHTTP(ctx, hs.Client(), hs.URL+"/bundles/app.tar.gz", []byte("bundle"), "upload-token"); err != nil {
		t.Fatal(err)
	}
	if string(got) != "bundle" {
		t.Errorf("the server got %q", got)
	}
	err := PublishHTTP(ctx, hs.Client(), hs.URL+"/bundles/app.tar.gz", []byte("bundle"), "wrong-token")
	if err == nil || !strings.Contains(err.Error(), "403") || strings.Contains(err.Error(), "wrong-token") {
		t.Fatalf("PublishHTTP with a wrong token = %v, want a 403 error without the token", err)
	}
}

// TestSourceLongPoll: a server that answers with OPA's bundle content type long-polls: the
// source asks again at once (not after PollMin) with Prefer: wait=<LongPoll>, and the server's
// answer when the bundle changes is handed over.
func TestSourceLongPoll(t *testing.T) {
	a, hashA := testManifest(t, "a")
	b, hashB := testManifest(t, "b")
	bundleA, bundleB := testBundle(t, hashA, a, ""), testBundle(t, hashB, b, "")
	waiting := make(chan string, 1) // the Prefer header of the held request
	release := make(chan struct{})
	var n atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.openpolicyagent.bundles")
		switch n.Add(1) {
		case 1:
			w.Header().Set("ETag", `"a"`)
			w.Write(bundleA)
		case 2:
			waiting <- r.Header.Get("Prefer")
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			w.Header().Set("ETag", `"b"`)
			w.Write(bundleB)
		default:
			<-r.Context().Done() // hold until the source stops
		}
	}))
	t.Cleanup(hs.Close)
	src, err := New(Config{Service: hs.URL, Resource: "b.tar.gz", PollMin: time.Minute, PollMax: time.Minute, LongPoll: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	updates := make(chan Update, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx, func(_ context.Context, u Update) { updates <- u }) }()
	t.Cleanup(func() { cancel(); hs.CloseClientConnections(); <-done })
	if u := <-updates; u.Err != nil || u.ETag != `"a"` {
		t.Fatalf("first update: %+v", u)
	}
	if prefer := <-waiting; !strings.Contains(prefer, "wait=5") {
		t.Errorf("the long poll's Prefer header is %q, want wait=5", prefer)
	}
	close(release)
	if u := <-updates; u.Err != nil || u.ETag != `"b"` {
		t.Fatalf("second update: %+v", u)
	}
}

// TestSourceSameBodyOnce: a server without ETags sends the same bundle at every poll; it is
// handed over once (a refused bundle is not refused again at every poll).
func TestSourceSameBodyOnce(t *testing.T) {
	a, hashA := testManifest(t, "a")
	body := testBundle(t, hashA, a, "")
	var polls atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		polls.Add(1)
		w.Write(body)
	}))
	t.Cleanup(hs.Close)
	src, err := New(Config{Service: hs.URL, Resource: "a.tar.gz", PollMin: time.Second, PollMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	updates := make(chan Update, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx, func(_ context.Context, u Update) { updates <- u }) }()
	<-updates
	for polls.Load() < 3 {
		select {
		case u := <-updates:
			t.Fatalf("the same bundle was handed over again: %+v", u)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	<-done
	select { // a poll's update is sent before the next poll starts
	case u := <-updates:
		t.Fatalf("the same bundle was handed over again: %+v", u)
	default:
	}
}
