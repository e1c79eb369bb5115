package bundlesource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/download"
	"github.com/open-policy-agent/opa/v1/logging"
	"github.com/open-policy-agent/opa/v1/plugins"
	"github.com/open-policy-agent/opa/v1/plugins/rest"
)

// Config is where a replica's builds come from: OPA's services[].url and bundles[].resource, and
// how often to ask.
type Config struct {
	Service   string // the bundle server's base URL, http(s)://…
	Resource  string // the bundle's path on it, e.g. bundles/quickstart.tar.gz
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
	u, err := url.Parse(c.Service)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("service %q is not an http(s):// URL", c.Service)
	}
	if strings.TrimLeft(c.Resource, "/") == "" {
		return errors.New("resource is empty: name the bundle's path on the server, e.g. bundles/app.tar.gz")
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

// Source polls a bundle server.
type Source struct {
	cfg Config
	d   *download.Downloader
}

// New prepares a source; Run starts it.
func New(cfg Config) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	svc := map[string]any{"url": cfg.Service}
	if cfg.TokenFile != "" {
		svc["credentials"] = map[string]any{"bearer": map[string]any{"token_path": cfg.TokenFile}}
	}
	raw, err := json.Marshal(svc)
	if err != nil {
		return nil, fmt.Errorf("bundle service: %w", err)
	}
	client, err := rest.New(raw, nil, rest.Logger(logging.NewNoOpLogger()))
	if err != nil {
		return nil, fmt.Errorf("bundle service %s: %w", cfg.Service, err)
	}
	lo, hi := cfg.polling()
	trigger := plugins.TriggerPeriodic
	dc := download.Config{Trigger: &trigger, Polling: download.PollingConfig{MinDelaySeconds: seconds(lo), MaxDelaySeconds: seconds(hi)}}
	if cfg.LongPoll > 0 {
		dc.Polling.LongPollingTimeoutSeconds = seconds(cfg.LongPoll)
	}
	if err := dc.ValidateAndInjectDefaults(); err != nil {
		return nil, fmt.Errorf("bundle polling: %w", err)
	}
	d := download.New(dc, client, strings.TrimLeft(cfg.Resource, "/")).WithSizeLimitBytes(MaxBundleBytes).WithBundlePersistence(true)
	return &Source{cfg: cfg, d: d}, nil
}

func seconds(d time.Duration) *int64 {
	s := int64(d / time.Second)
	return &s
}

// URL is the bundle's full URL.
func (s *Source) URL() string {
	return strings.TrimRight(s.cfg.Service, "/") + "/" + strings.TrimLeft(s.cfg.Resource, "/")
}

// Run polls until ctx ends, calling f with each new bundle and each failure (never for a 304:
// the bundle did not change). f runs on the polling goroutine: the next poll waits for it.
func (s *Source) Run(ctx context.Context, f func(context.Context, Update)) {
	s.d.WithCallback(func(ctx context.Context, u download.Update) error {
		switch {
		case u.Error != nil:
			f(ctx, Update{Err: describe(u.Error)})
		case u.Bundle != nil && u.Raw != nil:
			raw, err := readAll(u.Raw)
			if err != nil {
				f(ctx, Update{Err: fmt.Errorf("read the downloaded bundle: %w", err)})
				return nil
			}
			f(ctx, Update{Bundle: raw, ETag: u.ETag})
		}
		return nil
	})
	s.d.Start(ctx)
	<-ctx.Done()
	s.d.Stop(context.WithoutCancel(ctx))
}

// describe turns the downloader's errors into what an operator acts on: a server's HTTP status, a
// bundle that does not read (a *Refused, unreadable).
func describe(err error) error {
	var he download.HTTPError
	if errors.As(err, &he) {
		return fmt.Errorf("the bundle server answered HTTP %d", he.StatusCode)
	}
	if strings.HasPrefix(err.Error(), "request failed") {
		return fmt.Errorf("the bundle server is unreachable: %w", err)
	}
	return &Refused{ReasonUnreadable, fmt.Errorf("read the downloaded bundle: %w", err)}
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
