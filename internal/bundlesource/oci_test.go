package bundlesource

import (
	"bytes"
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
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// testRegistry is an OCI registry on loopback (go-containerregistry's), counting manifest HEADs,
// GETs and blob GETs and keeping the last Authorization header; with token set, it answers 401 to
// requests without that bearer token.
type testRegistry struct {
	host      string // 127.0.0.1:port
	heads     atomic.Int32
	gets      atomic.Int32 // manifests and blobs
	blobGets  atomic.Int32
	lastAuth  atomic.Value
	tokenWant string
}

func newTestRegistry(t *testing.T, token string) *testRegistry {
	t.Helper()
	reg := &testRegistry{tokenWant: token}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		reg.lastAuth.Store(auth)
		if reg.tokenWant != "" && auth != bearer(reg.tokenWant) {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"who are you"}]}`, http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == http.MethodHead && strings.Contains(r.URL.Path, "/manifests/"):
			reg.heads.Add(1)
		case r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/"):
			reg.blobGets.Add(1)
			reg.gets.Add(1)
		case r.Method == http.MethodGet:
			reg.gets.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	reg.host = strings.TrimPrefix(hs.URL, "http://")
	return reg
}

// bearer is the Authorization header OPA sends to a service of type oci with a bearer token.
func bearer(token string) string {
	return "Bearer " + base64.StdEncoding.EncodeToString([]byte(token))
}

func tokenFile(t *testing.T, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOCIConfig(t *testing.T) {
	tests := []struct {
		name              string
		service, resource string
		want              string // the reference; "" when invalid
		err               string // part of the error
	}{
		{"repository and tag", "oci://ghcr.io", "acme/lush:v1", "oci://ghcr.io/acme/lush:v1", ""},
		{"OPA's resource names the registry", "oci://ghcr.io/", "ghcr.io/acme/lush:v1", "oci://ghcr.io/acme/lush:v1", ""},
		{"a digest", "oci://r.example.com:5000", "lush@sha256:" + strings.Repeat("ab", 32), "oci://r.example.com:5000/lush@sha256:" + strings.Repeat("ab", 32), ""},
		{"a repository prefix", "oci://r.example.com/team", "app:prod", "oci://r.example.com/team/app:prod", ""},
		{"plain HTTP on loopback", "oci+http://127.0.0.1:5000", "lush:v1", "oci+http://127.0.0.1:5000/lush:v1", ""},
		{"plain HTTP elsewhere", "oci+http://r.example.com", "lush:v1", "", "loopback"},
		{"no tag", "oci://ghcr.io", "acme/lush", "", "tag or digest"},
		{"no resource", "oci://ghcr.io", "", "", "resource is empty"},
		{"a bad repository", "oci://ghcr.io", "Acme/Lush:v1", "", "not a registry reference"},
		{"a password in the service", "oci://ci:s3cret@ghcr.io", "acme/lush:v1", "", "no user or password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Config{Service: tt.service, Resource: tt.resource}.Validate()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("Validate = %v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			src, err := New(Config{Service: tt.service, Resource: tt.resource})
			if err != nil {
				t.Fatal(err)
			}
			if src.URL() != tt.want {
				t.Errorf("URL = %s, want %s", src.URL(), tt.want)
			}
		})
	}
	if err := (Config{Service: "oci://ghcr.io", Resource: "a/b:v1", LongPoll: 30 * time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "long-poll") {
		t.Errorf("an OCI service with long polling: %v, want an error", err)
	}
}

// TestOCISourcePolls: the source pulls what PublishOCI pushed (with the bearer token from the
// file), asks with a HEAD only while the manifest's digest does not change (no download, no
// update), and picks up the new digest when another build is pushed to the tag.
func TestOCISourcePolls(t *testing.T) {
	reg := newTestRegistry(t, "reg-token")
	tok := tokenFile(t, "reg-token")
	a, hashA := testManifest(t, "a")
	b, hashB := testManifest(t, "b")
	bundleA, bundleB := testBundle(t, hashA, a, ""), testBundle(t, hashB, b, "")
	ctx := context.Background()
	target := "oci+http://" + reg.host + "/lush/app:v1"
	digestA, err := PublishOCI(ctx, target, bundleA, hashA, tok)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := PublishOCI(ctx, target, bundleA, hashA, tok); err != nil || again != digestA {
		t.Errorf("publishing the same build again gives %s (%v), want the same digest %s", again, err, digestA)
	}
	src, err := New(Config{Service: "oci+http://" + reg.host, Resource: "lush/app:v1", TokenFile: tok, PollMin: time.Second, PollMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	updates := make(chan Update, 10)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); src.Run(runCtx, func(_ context.Context, u Update) { updates <- u }) }()
	t.Cleanup(func() { cancel(); <-done })

	u := <-updates
	if u.Err != nil || !bytes.Equal(u.Bundle, bundleA) || u.ETag != digestA {
		t.Fatalf("first update: err %v, %d bytes, ETag %s; want bundle A under %s", u.Err, len(u.Bundle), u.ETag, digestA)
	}
	gets, heads := reg.gets.Load(), reg.heads.Load()
	for reg.heads.Load() < heads+2 { // two more polls: HEADs only
		select {
		case u := <-updates:
			t.Fatalf("an update while the manifest did not change: %+v", u)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if got := reg.gets.Load(); got != gets {
		t.Errorf("%d downloads (manifest or blob) while the manifest did not change", got-gets)
	}
	if _, err := PublishOCI(ctx, target, bundleB, hashB, tok); err != nil {
		t.Fatal(err)
	}
	u = <-updates
	if u.Err != nil || !bytes.Equal(u.Bundle, bundleB) {
		t.Fatalf("second update: %v, %d bytes; want bundle B", u.Err, len(u.Bundle))
	}
	if _, got, err := Unpack(u.Bundle); err != nil || got != hashB {
		t.Fatalf("Unpack(pulled B) = %s, %v", got, err)
	}
	if got, _ := reg.lastAuth.Load().(string); got != bearer("reg-token") {
		t.Errorf("Authorization = %q, want the token from the file, base64-encoded as OPA sends it", got)
	}
}

// TestOCIArtifact: what PublishOCI pushes is OPA's layout: an image manifest with the image
// config media type and the bundle as the one tar+gzip layer, annotated with the revision.
func TestOCIArtifact(t *testing.T) {
	reg := newTestRegistry(t, "")
	a, hash := testManifest(t, "a")
	body := testBundle(t, hash, a, "")
	if _, err := PublishOCI(context.Background(), "oci+http://"+reg.host+"/lush/app:v1", body, hash, ""); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+reg.host+"/v2/lush/app/manifests/v1", nil)
	req.Header.Set("Accept", ocispec.MediaTypeImageManifest)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m ocispec.Manifest
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Config.MediaType != "application/vnd.oci.image.config.v1+json" ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" || m.Layers[0].Size != int64(len(body)) ||
		m.Annotations[ocispec.AnnotationRevision] != hash {
		t.Errorf("manifest = %+v", m)
	}
}

// TestOCISourceFailures: a missing tag, a wrong token, a bundle over the size bound and a
// manifest without a bundle layer are failures naming the reference (not refusals: nothing was
// downloaded to refuse), and nothing is downloaded past the bound.
func TestOCISourceFailures(t *testing.T) {
	reg := newTestRegistry(t, "reg-token")
	tok := tokenFile(t, "reg-token")
	a, hash := testManifest(t, "a")
	ctx := context.Background()
	if _, err := PublishOCI(ctx, "oci+http://"+reg.host+"/lush/app:v1", testBundle(t, hash, a, ""), hash, tok); err != nil {
		t.Fatal(err)
	}
	if _, err := PublishOCI(ctx, "oci+http://"+reg.host+"/lush/other:v1", testBundle(t, hash, a, ""), hash, ""); err == nil {
		t.Error("a push without the token succeeded")
	}
	tests := []struct {
		name     string
		resource string
		token    string
		maxLayer int64
		want     string
	}{
		{"a missing tag", "lush/app:nope", tok, MaxBundleBytes, "no such manifest"},
		{"a missing repository", "lush/none:v1", tok, MaxBundleBytes, "no such manifest"},
		{"a wrong token", "lush/app:v1", tokenFile(t, "wrong"), MaxBundleBytes, "401"},
		{"a bundle over the bound", "lush/app:v1", tok, 100, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := New(Config{Service: "oci+http://" + reg.host, Resource: tt.resource, TokenFile: tt.token})
			if err != nil {
				t.Fatal(err)
			}
			src.oci.maxLayer = tt.maxLayer
			blobs := reg.blobGets.Load()
			body, err := src.poll(ctx, &pollState{})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), src.URL()) || RefusalReason(err) != "" {
				t.Fatalf("poll = %d bytes, %v; want a failure with %q naming %s", len(body), err, tt.want, src.URL())
			}
			if strings.Contains(err.Error(), "wrong") {
				t.Errorf("the error shows the token: %v", err)
			}
			if tt.maxLayer < MaxBundleBytes && reg.blobGets.Load() != blobs {
				t.Error("the bundle over the bound was downloaded")
			}
		})
	}
}

// TestOCIBadSignatureRefused: a bundle pulled from a registry takes the same path as one from an
// HTTP server: signed by another key, Verify refuses it (signature); signed by the key, it passes.
func TestOCIBadSignatureRefused(t *testing.T) {
	reg := newTestRegistry(t, "")
	m, hash := testManifest(t, "a")
	keys := bundle.NewVerificationConfig(map[string]*bundle.KeyConfig{"default": {Key: secret, Algorithm: "HS256"}}, "default", "", nil)
	ctx := context.Background()
	for _, tt := range []struct {
		tag, key string
		ok       bool
	}{{"good", secret, true}, {"bad", "another-secret-of-some-length", false}} {
		if _, err := PublishOCI(ctx, "oci+http://"+reg.host+"/lush/app:"+tt.tag, testBundle(t, hash, m, tt.key), hash, ""); err != nil {
			t.Fatal(err)
		}
		src, err := New(Config{Service: "oci+http://" + reg.host, Resource: "lush/app:" + tt.tag})
		if err != nil {
			t.Fatal(err)
		}
		body, err := src.poll(ctx, &pollState{})
		if err != nil {
			t.Fatal(err)
		}
		err = Verify(body, keys)
		if tt.ok != (err == nil) || !tt.ok && RefusalReason(err) != ReasonSignature {
			t.Errorf("%s: Verify = %v, want ok=%v", tt.tag, err, tt.ok)
		}
	}
}

func TestPublishOCITargets(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct{ target, want string }{
		{"oci+http://registry.example.com/lush/app:v1", "loopback"},
		{"oci://127.0.0.1:1/lush/app", "tag or digest"},
		{"oci://127.0.0.1:1/lush/app@sha256:" + strings.Repeat("ab", 32), "not a digest"},
		{"https://127.0.0.1:1/lush/app:v1", "not an oci://"},
	} {
		if _, err := PublishOCI(ctx, tt.target, []byte("x"), "", ""); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("PublishOCI(%s) = %v, want %q", tt.target, err, tt.want)
		}
	}
}

// roundTripFunc records requests for TestBearerTransport.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestBearerTransport: the token goes to the registry only (not to storage a blob download is
// redirected to), and never over a token the registry's challenge got.
func TestBearerTransport(t *testing.T) {
	tok := tokenFile(t, "reg-token")
	var got string
	tr := &bearerTransport{tokenFile: tok, host: "registry.example.com", base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r.Header.Get("Authorization")
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	})}
	for _, tt := range []struct{ url, auth, want string }{
		{"https://registry.example.com/v2/", "", bearer("reg-token")},
		{"https://storage.example.net/blob?sig=x", "", ""},
		{"https://registry.example.com/v2/", "Bearer from-the-challenge", "Bearer from-the-challenge"},
	} {
		req, _ := http.NewRequest(http.MethodGet, tt.url, nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		if _, err := tr.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("%s: Authorization = %q, want %q", tt.url, got, tt.want)
		}
	}
}

// TestOCIManifests: an image index is followed to the manifest with the bundle layer (as OPA
// does); a manifest without one (a container image under the tag) is a failure that says so.
func TestOCIManifests(t *testing.T) {
	reg := newTestRegistry(t, "")
	m, hash := testManifest(t, "a")
	body := testBundle(t, hash, m, "")
	ctx := context.Background()
	if _, err := PublishOCI(ctx, "oci+http://"+reg.host+"/lush/app:v1", body, hash, ""); err != nil {
		t.Fatal(err)
	}
	ref, err := parseOCI("oci+http://" + reg.host + "/lush/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	repo, err := ref.repository("", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	image, err := repo.Resolve(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	push := func(tag, mediaType string, doc any) {
		t.Helper()
		raw, _ := json.Marshal(doc)
		desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
		if err := repo.PushReference(ctx, desc, bytes.NewReader(raw), tag); err != nil {
			t.Fatal(err)
		}
	}
	push("index", ocispec.MediaTypeImageIndex, ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{image}})
	config := []byte(`{"architecture":"amd64","os":"linux"}`)
	configDesc := ocispec.Descriptor{MediaType: MediaTypeConfig, Digest: digest.FromBytes(config), Size: int64(len(config))}
	if err := repo.Blobs().Push(ctx, configDesc, bytes.NewReader(config)); err != nil {
		t.Fatal(err)
	}
	push("image", ocispec.MediaTypeImageManifest, ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: configDesc, Layers: []ocispec.Descriptor{configDesc}}) // a layer, but not a bundle's

	for _, tt := range []struct{ tag, err string }{{"index", ""}, {"image", "has no layer of media type application/vnd.oci.image.layer.v1.tar+gzip"}} {
		src, err := New(Config{Service: "oci+http://" + reg.host, Resource: "lush/app:" + tt.tag})
		if err != nil {
			t.Fatal(err)
		}
		got, err := src.poll(ctx, &pollState{})
		if tt.err == "" && (err != nil || !bytes.Equal(got, body)) || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: %d bytes, %v; want the bundle, or an error with %q", tt.tag, len(got), err, tt.err)
		}
	}
}
