package bundlesource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/logging"
	"github.com/open-policy-agent/opa/v1/plugins/rest"
)

// Config is where a replica's builds come from: OPA's services[].url and bundles[].resource, and
// how often to ask.
type Config struct {
	// Service is the bundle server's base URL, http(s)://…, or an OCI registry (OPA's
	// services[].type: oci): oci://host[:port][/prefix], or oci+http:// for one on loopback.
	Service string
	// Resource is the bundle's path on the server, e.g. bundles/quickstart.tar.gz; on a
	// registry, the repository and a tag or digest (lush/app:v1, lush/app@sha256:…), or OPA's
	// resource host[:port]/repository:tag.
	Resource  string
	TokenFile string // optional: a file holding a bearer token (read before every request)
	// PollMin and PollMax bound the jittered delay between two polls (whole seconds, at least
	// 1s; default 10s and 20s). LongPoll, when set, asks servers that support it to hold the
	// request until the bundle changes, up to that long.
	PollMin, PollMax, LongPoll time.Duration
}

// Defaults of Config's polling.
const (
	DefaultPollMin = 10 * time.Second
	DefaultPollMax = 20 * time.Second
)

// Validate checks c and names the field at fault.
func (c Config) Validate() error {
	if IsOCI(c.Service) {
		if _, err := ociServiceRef(c.Service, c.Resource); err != nil {
			return err
		}
		if c.LongPoll != 0 {
			return errors.New("long poll: OCI registries do not long-poll; leave it off with an oci:// service")
		}
	} else {
		u, err := url.Parse(c.Service)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("service %q is not an http(s):// or oci:// URL", c.Service)
		}
		if strings.TrimLeft(c.Resource, "/") == "" {
			return errors.New("resource is empty: name the bundle's path on the server, e.g. bundles/app.tar.gz")
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"poll min", c.PollMin}, {"poll max", c.PollMax}, {"long poll", c.LongPoll}} {
		if d.v != 0 && (d.v < time.Second || d.v%time.Second != 0) {
			return fmt.Errorf("%s %s: give whole seconds, at least 1s (OPA's protocol counts in seconds)", d.name, d.v)
		}
	}
	if lo, hi := c.polling(); hi < lo {
		return fmt.Errorf("poll max %s is less than poll min %s", hi, lo)
	}
	return nil
}

func (c Config) polling() (lo, hi time.Duration) {
	lo, hi = c.PollMin, c.PollMax
	if lo == 0 {
		lo = DefaultPollMin
	}
	if hi == 0 {
		hi = max(DefaultPollMax, lo)
	}
	return lo, hi
}

// Update is what the source hands over after a poll: a new bundle (Bundle set), or a failure to
// get one (Err set: the server did not answer, answered an error, or sent what is not a bundle).
type Update struct {
	Bundle []byte
	ETag   string
	Err    error
}

// Source polls a bundle server with OPA's bundle protocol, through OPA's REST client (so that
// services[].credentials-style bearer tokens and TLS work as in OPA), or an OCI registry as
// OPA's OCI downloader does (the manifest's digest is the ETag). It does not use OPA's
// downloaders, which parses and verifies each bundle itself: a replica must see the bundle's bytes
// to say why it refuses one (bundlesource reasons), and must not download and refuse the same bad
// bundle again at every retry (the downloader forgets the ETag of a bundle it could not read).
type Source struct {
	cfg    Config
	client rest.Client // HTTP bundle servers
	path   string
	oci    *ociFetcher // OCI registries
	rand   *rand.Rand  // jitter
}

// New prepares a source; Run starts it.
func New(cfg Config) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	jitter := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	if IsOCI(cfg.Service) {
		ref, err := ociServiceRef(cfg.Service, cfg.Resource)
		if err != nil {
			return nil, err
		}
		repo, err := ref.repository(cfg.TokenFile, responseHeaderTimeout)
		if err != nil {
			return nil, err
		}
		return &Source{cfg: cfg, oci: &ociFetcher{ref: ref, repo: repo, maxLayer: MaxBundleBytes}, rand: jitter}, nil
	}
	svc := map[string]any{"url": cfg.Service}
	if cfg.TokenFile != "" {
		svc["credentials"] = map[string]any{"bearer": map[string]any{"token_path": cfg.TokenFile}}
	}
	if cfg.LongPoll > 0 { // the server holds the request up to LongPoll before it answers
		svc["response_header_timeout_seconds"] = int64((cfg.LongPoll + responseHeaderTimeout) / time.Second)
	} else {
		svc["response_header_timeout_seconds"] = int64(responseHeaderTimeout / time.Second)
	}
	raw, err := json.Marshal(svc)
	if err != nil {
		return nil, fmt.Errorf("bundle service: %w", err)
	}
	client, err := rest.New(raw, nil, rest.Logger(logging.NewNoOpLogger()))
	if err != nil {
		return nil, fmt.Errorf("bundle service %s: %w", cfg.Service, err)
	}
	return &Source{cfg: cfg, client: client, path: strings.TrimLeft(cfg.Resource, "/"), rand: jitter}, nil
}

// responseHeaderTimeout bounds the wait for a (not long-polled) answer.
const responseHeaderTimeout = 10 * time.Second

// URL is the bundle's full URL (oci://host/repository:tag for a registry), without a password
// the service URL may carry (it goes to logs and to the decision log).
func (s *Source) URL() string {
	if s.oci != nil {
		return s.oci.ref.String()
	}
	base := s.cfg.Service
	if u, err := url.Parse(base); err == nil {
		base = u.Redacted()
	}
	return strings.TrimRight(base, "/") + "/" + s.path
}

// Run polls until ctx ends, calling f with each new bundle and each failure, on its own
// goroutine (the next poll waits for f). A bundle is handed over once: the server answers 304
// while its ETag does not change (a registry: the manifest's digest, which a HEAD gets), and a
// body equal to the last one is not handed over again. Between polls it waits a random delay between PollMin and PollMax; after a failure it backs
// off (from 100ms up to PollMax); while the server long-polls, it asks again at once.
func (s *Source) Run(ctx context.Context, f func(context.Context, Update)) {
	lo, hi := s.cfg.polling()
	var st pollState
	retries := 0
	for {
		bundle, err := s.poll(ctx, &st)
		if ctx.Err() != nil {
			return
		}
		var delay time.Duration
		switch {
		case err != nil:
			f(ctx, Update{Err: err})
			retries++
			delay = min(hi, 100*time.Millisecond<<min(retries, 10))
		case bundle != nil:
			retries = 0
			f(ctx, Update{Bundle: bundle, ETag: st.etag})
		default:
			retries = 0
		}
		if err == nil && !st.longPoll {
			delay = lo + time.Duration(s.rand.Int64N(int64(hi-lo)+1))
		}
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// pollState is what a poll remembers for the next: the ETag to send (a registry: the last
// manifest digest), the last body handed over (its SHA-256), and whether the server long-polls.
type pollState struct {
	etag     string
	digest   [32]byte
	longPoll bool
}

// poll asks once; it returns a new bundle, or nil when there is none.
func (s *Source) poll(ctx context.Context, st *pollState) ([]byte, error) {
	if s.oci != nil {
		return s.oci.fetch(ctx, st)
	}
	c := s.client.WithHeader("If-None-Match", st.etag)
	prefer := "modes=snapshot"
	if st.longPoll && s.cfg.LongPoll > 0 {
		prefer += ";wait=" + fmt.Sprint(int64(s.cfg.LongPoll/time.Second))
	}
	c = c.WithHeader("Prefer", prefer)
	resp, err := c.Do(ctx, http.MethodGet, s.path)
	if err != nil {
		st.longPoll = false
		return nil, fmt.Errorf("the bundle server is unreachable: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		if e := resp.Header.Get("ETag"); e != "" {
			st.etag = e
		}
		return nil, nil
	case http.StatusOK:
	default:
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		st.longPoll = false
		return nil, fmt.Errorf("the bundle server answered HTTP %d for %s", resp.StatusCode, s.URL())
	}
	st.longPoll = s.cfg.LongPoll > 0 && resp.Header.Get("Content-Type") == "application/vnd.openpolicyagent.bundles"
	body, err := readAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", s.URL(), err)
	}
	st.etag = resp.Header.Get("ETag")
	digest := sha256.Sum256(body)
	if digest == st.digest {
		return nil, nil // the same bundle again (a server without ETags)
	}
	st.digest = digest
	return body, nil
}

// readAll reads r whole, bounded by MaxBundleBytes.
func readAll(r io.Reader) ([]byte, error) {
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r, MaxBundleBytes+1))
	if err != nil {
		return nil, err
	}
	if n > MaxBundleBytes {
		return nil, fmt.Errorf("the bundle is larger than %d MiB", MaxBundleBytes>>20)
	}
	return buf.Bytes(), nil
}
