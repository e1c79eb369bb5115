package authserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// hydraOptions is what Hydra is started with.
type hydraOptions struct {
	path            string
	issuer          string // the front's URL
	loginURL        string // the login and consent app
	scopes          []string
	accessTokenTTL  time.Duration
	refreshTokenTTL time.Duration
	logs            io.Writer
}

func (s *Server) hydraOptions() hydraOptions {
	logs := s.cfg.Logs
	if logs == nil {
		logs = io.Discard
	}
	return hydraOptions{
		path:            s.cfg.HydraPath,
		issuer:          s.frontURL,
		loginURL:        s.loginURL,
		scopes:          s.cfg.Scopes,
		accessTokenTTL:  s.cfg.AccessTokenTTL,
		refreshTokenTTL: s.cfg.RefreshTokenTTL,
		logs:            logs,
	}
}

// hydraProcess is a running `hydra serve all`.
type hydraProcess struct {
	cmd       *exec.Cmd
	dir       string // its configuration (removed by stop)
	publicURL string
	adminURL  string
	exited    chan struct{} // closed when the process has exited
	waitErr   error         // set before exited is closed
}

// errHydraExited is the error of a Hydra that exited before it was ready (a port taken, a bad
// configuration); its output is in the logs.
var errHydraExited = errors.New("hydra exited before it was ready")

// baseScopes are the scopes every client may ask for.
var baseScopes = []string{"openid", "offline_access", "offline", "email", "profile"}

// hydraConfig is Hydra v2.3.0's configuration (see its spec/config.json).
func hydraConfig(o hydraOptions, publicPort, adminPort int, secret string) map[string]any {
	scopes := append(append([]string(nil), baseScopes...), o.scopes...)
	return map[string]any{
		"dsn": "memory",
		"serve": map[string]any{
			"public": map[string]any{"host": "127.0.0.1", "port": publicPort},
			"admin":  map[string]any{"host": "127.0.0.1", "port": adminPort},
		},
		"urls": map[string]any{
			"self":    map[string]any{"issuer": o.issuer, "public": o.issuer},
			"login":   o.loginURL + "/login",
			"consent": o.loginURL + "/consent",
			"error":   o.loginURL + "/error",
		},
		"secrets": map[string]any{"system": []string{secret}},
		"strategies": map[string]any{
			"access_token": "jwt",
			"jwt":          map[string]any{"scope_claim": "both"},
		},
		"oauth2": map[string]any{
			"allowed_top_level_claims": []string{"email", "groups"},
			"mirror_top_level_claims":  false,
			"pkce":                     map[string]any{"enforced_for_public_clients": true},
		},
		"oidc": map[string]any{
			"dynamic_client_registration": map[string]any{"enabled": true, "default_scope": scopes},
		},
		"webfinger": map[string]any{
			"oidc_discovery": map[string]any{
				"client_registration_url": o.issuer + "/oauth2/register",
				"supported_scope":         scopes,
				"supported_claims":        []string{"sub", "email", "groups"},
			},
		},
		"ttl": map[string]any{
			"access_token":  o.accessTokenTTL.String(),
			"refresh_token": o.refreshTokenTTL.String(),
			"id_token":      o.accessTokenTTL.String(),
		},
		"log": map[string]any{"leak_sensitive_values": false, "level": "info"},
	}
}

// startHydra starts Hydra on two free ports and waits until its admin API is ready.
func startHydra(ctx context.Context, o hydraOptions) (_ *hydraProcess, err error) {
	publicPort, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("start hydra: public port: %w", err)
	}
	adminPort, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("start hydra: admin port: %w", err)
	}
	secret, err := randomHex(32)
	if err != nil {
		return nil, fmt.Errorf("start hydra: system secret: %w", err)
	}
	dir, err := os.MkdirTemp("", "lush-hydra-")
	if err != nil {
		return nil, fmt.Errorf("start hydra: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	conf, err := json.Marshal(hydraConfig(o, publicPort, adminPort, secret))
	if err != nil {
		return nil, fmt.Errorf("start hydra: configuration: %w", err)
	}
	confPath := filepath.Join(dir, "hydra.json") // JSON is YAML
	if err := os.WriteFile(confPath, conf, 0o600); err != nil {
		return nil, fmt.Errorf("start hydra: %w", err)
	}

	cmd := exec.Command(o.path, "serve", "all", "--dev", "--sqa-opt-out", "--config", confPath)
	cmd.Dir = dir
	// Only what Hydra needs: no inherited DSN, SECRETS_* or URLS_* overrides the configuration.
	cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin", "TMPDIR=" + os.TempDir()}
	cmd.Stdout = o.logs
	cmd.Stderr = o.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start hydra %s: %w", o.path, err)
	}
	h := &hydraProcess{
		cmd:       cmd,
		dir:       dir,
		publicURL: "http://127.0.0.1:" + strconv.Itoa(publicPort),
		adminURL:  "http://127.0.0.1:" + strconv.Itoa(adminPort),
		exited:    make(chan struct{}),
	}
	go func() {
		h.waitErr = cmd.Wait()
		close(h.exited)
	}()
	if err := h.waitReady(ctx); err != nil {
		_ = h.stop()
		return nil, err
	}
	return h, nil
}

// waitReady polls Hydra's readiness endpoints until both answer 200, Hydra exits or ctx ends.
func (h *hydraProcess) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if h.ready(ctx, client) {
			return nil
		}
		select {
		case <-h.exited:
			return fmt.Errorf("start hydra: %w (%v): see its output", errHydraExited, h.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("start hydra: not ready: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

func (h *hydraProcess) ready(ctx context.Context, client *http.Client) bool {
	for _, u := range []string{h.adminURL + "/health/ready", h.publicURL + "/health/ready"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
	}
	return true
}

// stop ends Hydra's process group (SIGTERM, then SIGKILL after 5s), waits for it, and removes
// its files.
func (h *hydraProcess) stop() error {
	defer os.RemoveAll(h.dir)
	pgid := h.cmd.Process.Pid
	select {
	case <-h.exited:
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // anything it left behind
		return nil
	default:
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case <-h.exited:
	case <-timer.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-h.exited
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}
