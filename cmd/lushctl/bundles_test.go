package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/lush-agents/lush/internal/bundlesource"
)

// The LUSH_BUNDLE_* variables: a bundle server turns the mode on; mistakes name the variable.
func TestServeBundleEnv(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
		want string // part of the usage error; "" for valid
	}{
		{"off", nil, ""},
		{"on", map[string]string{"LUSH_BUNDLE_SERVICE": "http://bundles:8080", "LUSH_BUNDLE_RESOURCE": "bundles/app.tar.gz",
			"LUSH_BUNDLE_POLL_MIN": "2s", "LUSH_BUNDLE_POLL_MAX": "4s", "LUSH_BUNDLE_LONG_POLL": "30s"}, ""},
		{"no resource", map[string]string{"LUSH_BUNDLE_SERVICE": "http://bundles:8080"}, "LUSH_BUNDLE_RESOURCE"},
		{"resource without a service", map[string]string{"LUSH_BUNDLE_RESOURCE": "a.tar.gz"}, "LUSH_BUNDLE_SERVICE is not"},
		{"not a URL", map[string]string{"LUSH_BUNDLE_SERVICE": "bundles:8080", "LUSH_BUNDLE_RESOURCE": "a.tar.gz"}, "http(s)"},
		{"sub-second poll", map[string]string{"LUSH_BUNDLE_SERVICE": "http://b", "LUSH_BUNDLE_RESOURCE": "a", "LUSH_BUNDLE_POLL_MIN": "500ms"}, "LUSH_BUNDLE_POLL_MIN"},
		{"max below min", map[string]string{"LUSH_BUNDLE_SERVICE": "http://b", "LUSH_BUNDLE_RESOURCE": "a", "LUSH_BUNDLE_POLL_MIN": "9s", "LUSH_BUNDLE_POLL_MAX": "3s"}, "less than"},
		{"with LUSH_BUILD", map[string]string{"LUSH_BUNDLE_SERVICE": "http://b", "LUSH_BUNDLE_RESOURCE": "a", "LUSH_BUILD": "abcd"}, "LUSH_BUILD and LUSH_BUNDLE_SERVICE"},
		{"a missing key file", map[string]string{"LUSH_BUNDLE_VERIFY_KEY": "/nonexistent/key.pem"}, "LUSH_BUNDLE_VERIFY_KEY"},
		{"a missing token file", map[string]string{"LUSH_BUNDLE_SERVICE": "http://b", "LUSH_BUNDLE_RESOURCE": "a", "LUSH_BUNDLE_TOKEN_FILE": "/nonexistent/t"}, "LUSH_BUNDLE_TOKEN_FILE"},
		{"an OCI registry", map[string]string{"LUSH_BUNDLE_SERVICE": "oci://ghcr.io", "LUSH_BUNDLE_RESOURCE": "acme/lush:prod",
			"LUSH_BUNDLE_POLL_MIN": "2s", "LUSH_BUNDLE_POLL_MAX": "4s"}, ""},
		{"an OCI resource without a tag", map[string]string{"LUSH_BUNDLE_SERVICE": "oci://ghcr.io", "LUSH_BUNDLE_RESOURCE": "acme/lush"}, "tag or digest"},
		{"an OCI registry long-polled", map[string]string{"LUSH_BUNDLE_SERVICE": "oci://ghcr.io", "LUSH_BUNDLE_RESOURCE": "acme/lush:v1", "LUSH_BUNDLE_LONG_POLL": "30s"}, "long-poll"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{}
			for _, v := range []string{"LUSH_BUNDLE_SERVICE", "LUSH_BUNDLE_RESOURCE", "LUSH_BUNDLE_TOKEN_FILE", "LUSH_BUNDLE_VERIFY_KEY",
				"LUSH_BUNDLE_VERIFY_KEY_ID", "LUSH_BUNDLE_VERIFY_ALG", "LUSH_BUNDLE_POLL_MIN", "LUSH_BUNDLE_POLL_MAX", "LUSH_BUNDLE_LONG_POLL", "LUSH_INSTANCE"} {
				vars[v] = ""
			}
			for k, v := range tt.vars {
				vars[k] = v
			}
			serveEnvFor(t, vars)
			e, err := readServeEnv()
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("readServeEnv = %v, want an error naming %s", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (tt.vars["LUSH_BUNDLE_SERVICE"] != "") != (e.bundles != nil) {
				t.Fatalf("bundles = %+v", e.bundles)
			}
			if e.bundles != nil && (e.bundles.PollMin != 2*time.Second || e.bundles.PollMax != 4*time.Second || e.bundles.LongPoll != durationOf(tt.vars["LUSH_BUNDLE_LONG_POLL"])) {
				t.Errorf("polling %+v", e.bundles)
			}
		})
	}
}

// deploy --to: a directory gets <resource> (by default bundles/<project>.tar.gz), a URL gets a
// PUT with the token; -o json says what was published; mistakes are usage errors (exit 2), a
// server that refuses the upload is exit 1.
func TestDeployTo(t *testing.T) {
	dir := quickstartCopy(t)
	r := lushctl(t, "", "build", "-q", "--offline", dir)
	if r.code != 0 {
		t.Fatalf("build: %s", r.stderr)
	}
	hash := strings.TrimSpace(r.stdout)
	pub := t.TempDir()

	r = lushctl(t, "", "deploy", hash[:8], dir, "--to", pub)
	want := filepath.Join(pub, "bundles", "quickstart.tar.gz")
	if r.code != 0 || !strings.Contains(r.stdout, "published "+hash) {
		t.Fatalf("deploy --to dir: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	data, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := bundlesource.Unpack(data); err != nil || got != hash {
		t.Fatalf("the published bundle: %v, hash %s, want %s", err, got, hash)
	}

	var mu sync.Mutex
	var put []byte
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		auth = r.Header.Get("Authorization")
		if r.Method != http.MethodPut || auth != "Bearer up-token" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		put, _ = io.ReadAll(r.Body)
	}))
	t.Cleanup(srv.Close)
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("up-token\n"), 0o600)
	r = lushctl(t, "", "deploy", hash[:8], dir, "--to", srv.URL+"/bundles/q.tar.gz", "--token-file", token, "-o", "json")
	var doc struct {
		Hash, To string
		Bytes    int
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &doc) != nil || doc.Hash != hash || doc.Bytes != len(data) {
		t.Fatalf("deploy --to URL -o json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	mu.Lock()
	if string(put) != string(data) {
		t.Errorf("the server got %d bytes, want the bundle's %d", len(put), len(data))
	}
	mu.Unlock()
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("wrong"), 0o600)
	if r = lushctl(t, "", "deploy", hash[:8], dir, "--to", srv.URL+"/b.tar.gz", "--token-file", bad); r.code != exitFailed ||
		!strings.Contains(r.stderr, "403") || strings.Contains(r.stderr, "wrong") {
		t.Errorf("an upload the server refuses: exit %d, want 1 with the status and without the token\n%s", r.code, r.stderr)
	}

	for _, tt := range []struct {
		name string
		args []string
	}{
		{"not a directory", []string{"--to", filepath.Join(pub, "missing")}},
		{"another scheme", []string{"--to", "s3://bucket/x"}},
		{"a resource outside", []string{"--to", pub, "--resource", "../x.tar.gz"}},
		{"a resource with a URL", []string{"--to", srv.URL, "--resource", "a.tar.gz"}},
		{"a token without --to", []string{"--token-file", token}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := lushctl(t, "", append([]string{"deploy", hash[:8], dir}, tt.args...)...)
			if r.code == 0 {
				t.Errorf("exit 0, want an error\n%s", r.stdout)
			}
		})
	}
}

func durationOf(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

// deploy --to oci://: the bundle is pushed to the registry with the token (a replica's source
// pulls the same build back, and -o json names the manifest's digest); a bad reference or a
// --resource is a usage error (exit 2), a registry that refuses the push is exit 1, without the
// token.
func TestDeployToOCI(t *testing.T) {
	dir := quickstartCopy(t)
	r := lushctl(t, "", "build", "-q", "--offline", dir)
	if r.code != 0 {
		t.Fatalf("build: %s", r.stderr)
	}
	hash := strings.TrimSpace(r.stdout)
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+base64.StdEncoding.EncodeToString([]byte("push-token")) {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"no"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("push-token\n"), 0o600)

	r = lushctl(t, "", "deploy", hash[:8], dir, "--to", "oci+http://"+host+"/lush/quickstart:v1", "--token-file", token, "-o", "json")
	var doc struct{ Hash, To, Digest string }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &doc) != nil || doc.Hash != hash || !strings.HasPrefix(doc.Digest, "sha256:") {
		t.Fatalf("deploy --to oci+http:// -o json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	src, err := bundlesource.New(bundlesource.Config{Service: "oci+http://" + host, Resource: "lush/quickstart:v1", TokenFile: token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	updates := make(chan bundlesource.Update, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(ctx, func(_ context.Context, u bundlesource.Update) {
			select {
			case updates <- u:
			default:
			}
		})
	}()
	u := <-updates
	cancel()
	<-done
	if u.Err != nil || u.ETag != doc.Digest {
		t.Fatalf("pulling it back: %v (ETag %s, want %s)", u.Err, u.ETag, doc.Digest)
	}
	if _, got, err := bundlesource.Unpack(u.Bundle); err != nil || got != hash {
		t.Fatalf("the pulled bundle: %v, hash %s, want %s", err, got, hash)
	}

	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("wrong-secret"), 0o600)
	if r = lushctl(t, "", "deploy", hash[:8], dir, "--to", "oci+http://"+host+"/lush/quickstart:v2", "--token-file", bad); r.code != exitFailed ||
		!strings.Contains(r.stderr, "401") || strings.Contains(r.stderr, "wrong-secret") {
		t.Errorf("a push the registry refuses: exit %d, want 1 with the status and without the token\n%s", r.code, r.stderr)
	}
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"plain HTTP to a remote registry", []string{"--to", "oci+http://registry.example.com/lush/q:v1"}},
		{"no tag", []string{"--to", "oci://" + host + "/lush/quickstart"}},
		{"a digest", []string{"--to", "oci://" + host + "/lush/quickstart@sha256:" + strings.Repeat("ab", 32)}},
		{"a resource", []string{"--to", "oci+http://" + host + "/lush/quickstart:v1", "--resource", "a.tar.gz"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if r := lushctl(t, "", append([]string{"deploy", hash[:8], dir}, tt.args...)...); r.code != exitUsage {
				t.Errorf("exit %d, want %d (usage)\n%s%s", r.code, exitUsage, r.stdout, r.stderr)
			}
		})
	}
}

// status --replicas: a table and a summary; exit 0 when all are ready on one build (the
// --expect one), 1 otherwise; --watch waits until they agree.
func TestStatusReplicas(t *testing.T) {
	const a, b = "aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111", "bbbb2222bbbb2222bbbb2222bbbb2222bbbb2222bbbb2222bbbb2222bbbb2222"
	var mu sync.Mutex
	revs := map[string]string{}
	next := map[string]string{} // the revision a replica switches to after answering once
	replica := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			rev := revs[name]
			if n := next[name]; n != "" {
				revs[name], next[name] = n, ""
			}
			mu.Unlock()
			if rev == "" {
				w.WriteHeader(http.StatusServiceUnavailable)
				json.NewEncoder(w).Encode(map[string]any{"status": "no build deployed", "ready": false,
					"last_error": map[string]any{"reason": "download", "error": "HTTP 404", "at": time.Now()}})
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"status": "ok", "ready": true, "revision": rev})
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	one, two := replica("one"), replica("two")
	list := one + "," + two
	set := func(r1, r2 string) { mu.Lock(); revs["one"], revs["two"] = r1, r2; mu.Unlock() }

	set(a, a)
	r := lushctl(t, "", "status", "--replicas", list)
	if r.code != 0 || !strings.Contains(r.stdout, "2/2 on aaaa1111aaaa") || !strings.Contains(r.stdout, "REPLICA") {
		t.Errorf("all on A: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = lushctl(t, "", "status", "--replicas", list, "--expect", "bbbb"); r.code != 1 {
		t.Errorf("all on A, expecting B: exit %d, want 1\n%s", r.code, r.stdout)
	}
	set(a, "")
	r = lushctl(t, "", "status", "--replicas", list, "-o", "json")
	var doc struct {
		Agree    bool `json:"agree"`
		Replicas []struct {
			Ready     bool `json:"ready"`
			LastError *struct {
				Reason string `json:"reason"`
			} `json:"last_error"`
		} `json:"replicas"`
	}
	if r.code != 1 || json.Unmarshal([]byte(r.stdout), &doc) != nil || doc.Agree || len(doc.Replicas) != 2 || doc.Replicas[1].Ready ||
		doc.Replicas[1].LastError == nil || doc.Replicas[1].LastError.Reason != "download" {
		t.Errorf("one not ready, -o json: exit %d\n%s", r.code, r.stdout)
	}
	set(a, b)
	if r = lushctl(t, "", "status", "--replicas", list+",http://127.0.0.1:1"); r.code != 1 || !strings.Contains(r.stdout, "unreachable") {
		t.Errorf("mixed and one unreachable: exit %d\n%s", r.code, r.stdout)
	}
	// --watch: the first replica reaches B after the first round (which does not agree).
	mu.Lock()
	next["one"] = b
	mu.Unlock()
	if r = lushctl(t, "", "status", "--replicas", list, "--expect", b[:8], "--watch", "--interval", "50ms", "--timeout", "20s"); r.code != 0 ||
		!strings.Contains(r.stdout, "2/2 on bbbb2222bbbb") {
		t.Errorf("--watch: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = lushctl(t, "", "status"); r.code != exitUsage {
		t.Errorf("no --replicas: exit %d, want %d", r.code, exitUsage)
	}
}
