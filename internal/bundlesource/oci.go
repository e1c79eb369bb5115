package bundlesource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// The OCI layout OPA pulls (services[].type: oci): an image manifest whose layer of media type
// MediaTypeBundleLayer is the bundle, with an image config (here an empty JSON object).
const (
	MediaTypeBundleLayer = ocispec.MediaTypeImageLayerGzip // application/vnd.oci.image.layer.v1.tar+gzip
	MediaTypeConfig      = ocispec.MediaTypeImageConfig    // application/vnd.oci.image.config.v1+json
)

// MaxManifestBytes bounds a manifest (or image index) read from a registry.
const MaxManifestBytes = 4 << 20

// maxIndexDepth bounds how deep image indexes nest before the bundle's manifest.
const maxIndexDepth = 4

// IsOCI reports whether a service or --to target names an OCI registry (oci://, oci+http://).
func IsOCI(target string) bool {
	return strings.HasPrefix(target, "oci://") || strings.HasPrefix(target, "oci+http://")
}

// ociRef is a bundle in an OCI registry: the registry, the repository and a tag or digest.
type ociRef struct {
	registry.Reference      // Registry (host[:port]), Repository, Reference (tag or digest)
	plainHTTP          bool // oci+http://: plain HTTP, loopback registries only
}

// parseOCI parses oci://host[:port]/repository:tag (or @sha256:…), and oci+http:// for a
// registry on this machine.
func parseOCI(s string) (ociRef, error) {
	scheme, rest, _ := strings.Cut(s, "://")
	if scheme != "oci" && scheme != "oci+http" {
		return ociRef{}, fmt.Errorf("%q is not an oci:// reference", s)
	}
	if host, _, _ := strings.Cut(rest, "/"); strings.Contains(host, "@") {
		return ociRef{}, errUserInfo
	}
	ref, err := registry.ParseReference(rest)
	if err != nil {
		return ociRef{}, fmt.Errorf("%q is not a registry reference like oci://registry.example.com/lush/app:v1: %w", s, err)
	}
	if ref.Reference == "" {
		return ociRef{}, fmt.Errorf("%q names no tag or digest: add one, e.g. %s:v1", s, s)
	}
	r := ociRef{Reference: ref, plainHTTP: scheme == "oci+http"}
	if r.plainHTTP && !loopback(ref.Registry) {
		return ociRef{}, fmt.Errorf("%q: oci+http:// is for registries on localhost and loopback addresses only; remote registries are reached over HTTPS: oci://%s", s, rest)
	}
	return r, nil
}

var errUserInfo = errors.New("an oci:// reference carries no user or password (it would show in logs): put a token in the token file")

// ociServiceRef joins a service (oci://host[:port][/prefix]) and a resource (repository:tag, or
// OPA's form host[:port]/repository:tag, whose host is the service's) into one reference.
func ociServiceRef(service, resource string) (ociRef, error) {
	base := strings.TrimRight(service, "/")
	_, hostpath, _ := strings.Cut(base, "://")
	host, _, _ := strings.Cut(hostpath, "/")
	if strings.Contains(host, "@") {
		return ociRef{}, errUserInfo
	}
	resource = strings.TrimLeft(resource, "/")
	if host != "" {
		resource = strings.TrimPrefix(resource, host+"/") // OPA's resource names the registry again
	}
	if resource == "" {
		return ociRef{}, errors.New("resource is empty: name the repository and tag, e.g. lush/app:v1")
	}
	r, err := parseOCI(base + "/" + resource)
	if err != nil {
		return ociRef{}, fmt.Errorf("service %q and resource %q: %w", service, resource, err)
	}
	return r, nil
}

// String is the reference as logs show it: oci://host/repository:tag.
func (r ociRef) String() string {
	scheme := "oci://"
	if r.plainHTTP {
		scheme = "oci+http://"
	}
	return scheme + r.Reference.String()
}

func loopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// repository is a client of r's repository that sends the bearer token tokenFile holds (read
// before every request, like OPA's bearer token_path, and base64-encoded as OPA sends it to a
// service of type oci) and answers registries' token challenges as oras-go does (anonymous
// tokens for public repositories).
func (r ociRef) repository(tokenFile string, timeout time.Duration) (*remote.Repository, error) {
	repo, err := remote.NewRepository(r.Registry + "/" + r.Repository)
	if err != nil {
		return nil, fmt.Errorf("repository %s: %w", r, err)
	}
	repo.PlainHTTP = r.plainHTTP
	repo.MaxMetadataBytes = MaxManifestBytes
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.ResponseHeaderTimeout = timeout
	repo.Client = &auth.Client{
		Client: &http.Client{Transport: &bearerTransport{base: transport, tokenFile: tokenFile, host: r.Registry}},
		Cache:  auth.NewCache(),
	}
	return repo, nil
}

// bearerTransport adds Authorization: Bearer <base64 of the token> to requests to the registry
// that carry no Authorization (a token the registry's challenge got is kept; a blob download
// redirected to storage elsewhere gets no token). The encoding is OPA's for OCI services, so that
// one token file serves Lush and OPA (ghcr.io takes a personal access token so).
type bearerTransport struct {
	base      http.RoundTripper
	tokenFile string
	host      string // the registry's host[:port]
}

func (t *bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.tokenFile != "" && req.URL.Host == t.host && req.Header.Get("Authorization") == "" {
		b, err := os.ReadFile(t.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("read the registry token: %w", err)
		}
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+base64.StdEncoding.EncodeToString([]byte(strings.TrimSpace(string(b)))))
	}
	return t.base.RoundTrip(req)
}

// ociFetcher polls a registry: a HEAD of the manifest each poll (its digest is the ETag), and the
// manifest and the bundle's layer only when the digest changes.
type ociFetcher struct {
	ref      ociRef
	repo     *remote.Repository
	maxLayer int64 // MaxBundleBytes (smaller in tests)
}

func (f *ociFetcher) fetch(ctx context.Context, st *pollState) ([]byte, error) {
	desc, err := f.repo.Resolve(ctx, f.ref.Reference.Reference)
	if err != nil {
		return nil, f.describe("resolve", err)
	}
	if desc.Digest.String() == st.etag {
		return nil, nil // the manifest did not change (HTTP's 304)
	}
	m, err := f.manifest(ctx, desc, 0)
	if err != nil {
		return nil, err
	}
	layer, _ := bundleLayer(m)
	if layer.Size > f.maxLayer || layer.Size < 0 {
		return nil, fmt.Errorf("the bundle in %s is %d bytes, more than the %d MiB a bundle may have", f.ref, layer.Size, f.maxLayer>>20)
	}
	if layer.Digest.Algorithm() == digest.SHA256 && layer.Digest.Encoded() == hex.EncodeToString(st.digest[:]) {
		st.etag = desc.Digest.String() // the same bundle under a new manifest
		return nil, nil
	}
	rc, err := f.repo.Blobs().Fetch(ctx, layer)
	if err != nil {
		return nil, f.describe("download the bundle of", err)
	}
	defer rc.Close()
	body, err := content.ReadAll(rc, layer) // checks the size and the digest
	if err != nil {
		return nil, fmt.Errorf("download the bundle of %s: %w", f.ref, err)
	}
	st.etag = desc.Digest.String()
	st.digest = sha256.Sum256(body)
	return body, nil
}

// manifest reads the image manifest desc names, descending image indexes to the first manifest
// with a bundle layer.
func (f *ociFetcher) manifest(ctx context.Context, desc ocispec.Descriptor, depth int) (*ocispec.Manifest, error) {
	if desc.Size > MaxManifestBytes {
		return nil, fmt.Errorf("the manifest of %s is %d bytes, more than %d MiB", f.ref, desc.Size, MaxManifestBytes>>20)
	}
	rc, err := f.repo.Fetch(ctx, desc)
	if err != nil {
		return nil, f.describe("download the manifest of", err)
	}
	defer rc.Close()
	raw, err := content.ReadAll(rc, desc)
	if err != nil {
		return nil, fmt.Errorf("download the manifest of %s: %w", f.ref, err)
	}
	var doc struct {
		ocispec.Manifest
		Manifests []ocispec.Descriptor `json:"manifests"` // an image index
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("the manifest of %s is not JSON: %w", f.ref, err)
	}
	if _, ok := bundleLayer(&doc.Manifest); ok {
		return &doc.Manifest, nil
	}
	if len(doc.Manifests) > 0 && depth < maxIndexDepth {
		for _, child := range doc.Manifests {
			if m, err := f.manifest(ctx, child, depth+1); err == nil {
				return m, nil
			}
		}
	}
	return nil, fmt.Errorf("%s has no layer of media type %s: push the bundle with lushctl deploy --to %s", f.ref, MediaTypeBundleLayer, f.ref)
}

func bundleLayer(m *ocispec.Manifest) (ocispec.Descriptor, bool) {
	for _, l := range m.Layers {
		if l.MediaType == MediaTypeBundleLayer {
			return l, true
		}
	}
	return ocispec.Descriptor{}, false
}

// describe wraps a registry error with what was being done, saying plainly when the reference
// is not there.
func (f *ociFetcher) describe(doing string, err error) error {
	if errors.Is(err, errdef.ErrNotFound) {
		return fmt.Errorf("%s %s: the registry has no such manifest or blob (push it with lushctl deploy --to %s): %w", doing, f.ref, f.ref, err)
	}
	return fmt.Errorf("%s %s: %w", doing, f.ref, err)
}

// PublishOCI pushes a build's bundle to an OCI registry as OPA pulls it (services[].type: oci):
// the bundle as a layer of media type MediaTypeBundleLayer, an empty image config, and an image
// manifest (annotated with the build's revision) tagged with target's tag (target: oci://host[:port]/repository:tag, or oci+http://
// for a loopback registry). tokenFile, when set, holds a bearer token. It returns the
// manifest's digest.
func PublishOCI(ctx context.Context, target string, bundle []byte, revision, tokenFile string) (string, error) {
	ref, err := publishRef(target)
	if err != nil {
		return "", err
	}
	repo, err := ref.repository(tokenFile, time.Minute)
	if err != nil {
		return "", err
	}
	config := []byte("{}")
	configDesc := ocispec.Descriptor{MediaType: MediaTypeConfig, Digest: digest.FromBytes(config), Size: int64(len(config))}
	layer := ocispec.Descriptor{MediaType: MediaTypeBundleLayer, Digest: digest.FromBytes(bundle), Size: int64(len(bundle)),
		Annotations: map[string]string{ocispec.AnnotationTitle: "bundle.tar.gz"}}
	for _, b := range []struct {
		desc ocispec.Descriptor
		data []byte
	}{{configDesc, config}, {layer, bundle}} {
		if err := pushBlob(ctx, repo, b.desc, b.data); err != nil {
			return "", fmt.Errorf("publish to %s: %w", ref, err)
		}
	}
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: configDesc, Layers: []ocispec.Descriptor{layer},
		Annotations: map[string]string{ocispec.AnnotationRevision: revision}} // no time: the same build gives the same digest
	raw, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("publish to %s: %w", ref, err)
	}
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
	if err := repo.PushReference(ctx, desc, bytes.NewReader(raw), ref.Reference.Reference); err != nil {
		return "", fmt.Errorf("publish to %s: tag the manifest: %w", ref, err)
	}
	return desc.Digest.String(), nil
}

// CheckOCITarget checks a PublishOCI target: oci://host[:port]/repository:tag (oci+http:// on
// loopback).
func CheckOCITarget(target string) error {
	_, err := publishRef(target)
	return err
}

func publishRef(target string) (ociRef, error) {
	ref, err := parseOCI(target)
	if err != nil {
		return ociRef{}, err
	}
	if ref.ValidateReferenceAsDigest() == nil {
		return ociRef{}, fmt.Errorf("%s: publish to a tag (oci://%s/%s:<tag>), not a digest", target, ref.Registry, ref.Repository)
	}
	return ref, nil
}

// pushBlob uploads a blob the registry does not have yet.
func pushBlob(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, data []byte) error {
	if ok, err := repo.Blobs().Exists(ctx, desc); err == nil && ok {
		return nil
	}
	if err := repo.Blobs().Push(ctx, desc, bytes.NewReader(data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return fmt.Errorf("upload %s: %w", desc.Digest, err)
	}
	return nil
}
