package vault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/vault/api"
)

// Vault auth methods.
const (
	AuthToken      = "token"
	AuthAppRole    = "approle"
	AuthKubernetes = "kubernetes"
)

// DefaultKubernetesJWT is where Kubernetes mounts a pod's service account token.
const DefaultKubernetesJWT = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// VaultConfig says how to reach HashiCorp Vault. It is the credentials.vault section of the
// gateway config (docs/credentials.md).
type VaultConfig struct {
	Address   string        `yaml:"address"`   // default $VAULT_ADDR
	Namespace string        `yaml:"namespace"` // Vault Enterprise namespace; default $VAULT_NAMESPACE
	CACert    string        `yaml:"ca_cert"`   // PEM file of the CA that signed Vault's certificate
	Timeout   time.Duration `yaml:"timeout"`   // per request; default 5s
	Auth      VaultAuth     `yaml:"auth"`
	// Path is the default path template of secrets (see Template); default DefaultPath.
	Path string `yaml:"path"`
	// Users: also look up users' credentials in Vault when the local file has none. Service
	// accounts always come from Vault when it is configured.
	Users bool `yaml:"users"`
}

// VaultAuth is how the gateway logs in to Vault.
type VaultAuth struct {
	Method string `yaml:"method"` // token (default), approle or kubernetes
	// token: a file holding the token; default $VAULT_TOKEN.
	TokenFile string `yaml:"token_file"`
	// approle and kubernetes: where the method is mounted; default the method's name.
	Mount string `yaml:"mount"`
	// approle.
	RoleID       string `yaml:"role_id"`
	SecretIDFile string `yaml:"secret_id_file"`
	// kubernetes: the Vault role, and the service account token (default DefaultKubernetesJWT).
	Role    string `yaml:"role"`
	JWTFile string `yaml:"jwt_file"`
}

// check validates the config; field names are those of the YAML file.
func (c *VaultConfig) check() []string {
	var p []string
	if c.Address == "" {
		p = append(p, "credentials.vault.address: required (or set VAULT_ADDR)")
	}
	if c.Path != "" {
		if err := CheckTemplate(c.Path); err != nil {
			p = append(p, "credentials.vault.path: "+err.Error())
		}
	}
	a := c.Auth
	switch a.Method {
	case AuthToken:
	case AuthAppRole:
		if a.RoleID == "" || a.SecretIDFile == "" {
			p = append(p, "credentials.vault.auth: approle needs role_id and secret_id_file")
		}
	case AuthKubernetes:
		if a.Role == "" {
			p = append(p, "credentials.vault.auth.role: required for kubernetes (the Vault role to log in as)")
		}
	default:
		p = append(p, fmt.Sprintf("credentials.vault.auth.method: %q is not one of token, approle, kubernetes", a.Method))
	}
	return p
}

// withDefaults fills unset fields from the environment and defaults.
func (c VaultConfig) withDefaults() VaultConfig {
	if c.Address == "" {
		c.Address = os.Getenv(api.EnvVaultAddress)
	}
	if c.Namespace == "" {
		c.Namespace = os.Getenv(api.EnvVaultNamespace)
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if c.Auth.Method == "" {
		c.Auth.Method = AuthToken
	}
	if c.Auth.Mount == "" {
		c.Auth.Mount = c.Auth.Method
	}
	if c.Auth.Method == AuthKubernetes && c.Auth.JWTFile == "" {
		c.Auth.JWTFile = DefaultKubernetesJWT
	}
	return c
}

// vaultClient reads secrets from Vault with a token it obtains and keeps renewed. It logs in
// lazily, so a gateway starts while Vault is down and serves calls that need no credential.
type vaultClient struct {
	cfg    VaultConfig
	client *api.Client
	log    *slog.Logger

	mu       sync.Mutex
	hasToken bool
	gen      int                // counts logins, so a stale renewal cannot drop a newer token
	watch    context.CancelFunc // stops the current token's renewal
	wg       sync.WaitGroup
}

func newVaultClient(cfg VaultConfig, log *slog.Logger) (*vaultClient, error) {
	ac := api.DefaultConfig()
	if ac.Error != nil {
		return nil, fmt.Errorf("vault client: %w", ac.Error)
	}
	ac.Address = cfg.Address
	ac.Timeout = cfg.Timeout
	ac.MaxRetries = 0 // the broker's cache rides out failures; retries would only delay the answer
	if cfg.CACert != "" {
		if err := ac.ConfigureTLS(&api.TLSConfig{CACert: cfg.CACert}); err != nil {
			return nil, fmt.Errorf("credentials.vault.ca_cert: %w", err)
		}
	}
	c, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("vault client: %w", err)
	}
	c.ClearToken() // NewClient picks up VAULT_TOKEN; the token comes from login
	if cfg.Namespace != "" {
		c.SetNamespace(cfg.Namespace)
	}
	return &vaultClient{cfg: cfg, client: c, log: log}, nil
}

// login obtains a token (unless one is held) and starts renewing it.
func (v *vaultClient) login(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.hasToken {
		return nil
	}
	a := v.cfg.Auth
	var secret *api.Secret
	switch a.Method {
	case AuthToken:
		tok, err := v.token()
		if err != nil {
			return err
		}
		v.client.SetToken(tok)
		self, err := v.client.Auth().Token().LookupSelfWithContext(ctx)
		if err != nil {
			v.client.ClearToken()
			return fmt.Errorf("vault token: %w", describe(err))
		}
		ttl, _ := self.TokenTTL()
		renewable, _ := self.TokenIsRenewable()
		secret = &api.Secret{Auth: &api.SecretAuth{ClientToken: tok, Renewable: renewable, LeaseDuration: int(ttl.Seconds())}}
	case AuthAppRole, AuthKubernetes:
		body, err := v.loginBody()
		if err != nil {
			return err
		}
		// The login request must not carry a token (a stale one would be used for nothing).
		v.client.ClearToken()
		s, err := v.client.Logical().WriteWithContext(ctx, "auth/"+strings.Trim(a.Mount, "/")+"/login", body)
		if err != nil {
			return fmt.Errorf("vault %s login: %w", a.Method, describe(err))
		}
		if s == nil || s.Auth == nil || s.Auth.ClientToken == "" {
			return fmt.Errorf("vault %s login: the answer holds no token", a.Method)
		}
		v.client.SetToken(s.Auth.ClientToken)
		secret = s
	}
	v.hasToken = true
	v.gen++
	if v.watch != nil {
		v.watch()
		v.watch = nil
	}
	if secret.Auth.Renewable && secret.Auth.LeaseDuration > 0 {
		v.renewToken(secret, v.gen)
	}
	return nil
}

// token reads the token of the token method.
func (v *vaultClient) token() (string, error) {
	if f := v.cfg.Auth.TokenFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("credentials.vault.auth.token_file: %w", err)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("credentials.vault.auth.token_file %s is empty", f)
	}
	if t := os.Getenv(api.EnvVaultToken); t != "" {
		return t, nil
	}
	return "", errors.New("no Vault token: set credentials.vault.auth.token_file or VAULT_TOKEN")
}

func (v *vaultClient) loginBody() (map[string]any, error) {
	a := v.cfg.Auth
	if a.Method == AuthAppRole {
		id, err := readTrimmed(a.SecretIDFile, "credentials.vault.auth.secret_id_file")
		if err != nil {
			return nil, err
		}
		return map[string]any{"role_id": a.RoleID, "secret_id": id}, nil
	}
	jwt, err := readTrimmed(a.JWTFile, "credentials.vault.auth.jwt_file")
	if err != nil {
		return nil, err
	}
	return map[string]any{"role": a.Role, "jwt": jwt}, nil
}

func readTrimmed(path, field string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s: %s is empty", field, path)
	}
	return s, nil
}

// renewToken keeps the token renewed with Vault's lifetime watcher until it can no longer be
// renewed (its max TTL) or the client closes; then the next read logs in again. Called with v.mu
// held.
func (v *vaultClient) renewToken(secret *api.Secret, gen int) {
	w, err := v.client.NewLifetimeWatcher(&api.LifetimeWatcherInput{Secret: secret})
	if err != nil {
		v.log.Warn("vault token renewal cannot start", "err", err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	v.watch = cancel
	v.wg.Add(2)
	go func() { defer v.wg.Done(); w.Start() }()
	go func() {
		defer v.wg.Done()
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-w.RenewCh():
				if r != nil && r.Secret != nil && r.Secret.Auth != nil {
					v.log.Debug("vault token renewed", "ttl", time.Duration(r.Secret.Auth.LeaseDuration)*time.Second)
				}
			case err := <-w.DoneCh():
				if err != nil {
					v.log.Warn("vault token renewal stopped; logging in again on the next read", "err", describe(err))
				}
				v.forget(gen)
				return
			}
		}
	}()
}

// forget drops the token of login gen (0: the current one) so that the next read logs in again.
func (v *vaultClient) forget(gen int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if gen == 0 || gen == v.gen {
		v.hasToken = false
	}
}

// read reads a secret at a logical path; nil when there is none. A token Vault no longer accepts
// is replaced by logging in again once (approle and kubernetes; a fixed token cannot be).
func (v *vaultClient) read(ctx context.Context, path string) (*api.Secret, error) {
	for attempt := 0; ; attempt++ {
		if err := v.login(ctx); err != nil {
			return nil, err
		}
		s, err := v.client.Logical().ReadWithContext(ctx, path)
		if err == nil {
			return s, nil
		}
		if status(err) == http.StatusForbidden && attempt == 0 && v.cfg.Auth.Method != AuthToken {
			v.forget(0)
			continue
		}
		if status(err) == http.StatusForbidden && v.cfg.Auth.Method == AuthToken {
			v.forget(0) // a revoked token stays revoked, but a new token file may have been written
		}
		return nil, fmt.Errorf("read %s: %w", path, describe(err))
	}
}

// write writes a secret's fields at a logical path: KV version 2 when the path has a /data/
// segment (the fields go under data), else as they are.
func (v *vaultClient) write(ctx context.Context, path string, fields map[string]any) error {
	if err := v.login(ctx); err != nil {
		return err
	}
	body := fields
	if strings.Contains(path, "/data/") {
		body = map[string]any{"data": fields}
	}
	if _, err := v.client.Logical().WriteWithContext(ctx, path, body); err != nil {
		return fmt.Errorf("write %s: %w", path, describe(err))
	}
	return nil
}

// renewLease extends a secret's lease.
func (v *vaultClient) renewLease(ctx context.Context, leaseID string, increment time.Duration) (*api.Secret, error) {
	if err := v.login(ctx); err != nil {
		return nil, err
	}
	s, err := v.client.Sys().RenewWithContext(ctx, leaseID, int(increment.Seconds()))
	if err != nil {
		return nil, fmt.Errorf("renew lease: %w", describe(err))
	}
	return s, nil
}

// close stops the token's renewal.
func (v *vaultClient) close() {
	v.mu.Lock()
	if v.watch != nil {
		v.watch()
	}
	v.mu.Unlock()
	v.wg.Wait()
}

// status is the HTTP status of a Vault error, 0 when Vault did not answer.
func status(err error) int {
	var re *api.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// vaultError is a Vault answer in one line: "Vault answered 403: permission denied".
type vaultError struct {
	msg string
	err error // the *api.ResponseError, for status()
}

func (e *vaultError) Error() string { return e.msg }
func (e *vaultError) Unwrap() error { return e.err }

var errorsOccurred = regexp.MustCompile(`^\s*\d+ errors? occurred:`)

// describe shortens vault/api's multi-line errors to one line that keeps the status and Vault's
// messages.
func describe(err error) error {
	var re *api.ResponseError
	if !errors.As(err, &re) {
		return err
	}
	var msgs []string
	for _, m := range re.Errors {
		// Vault joins several errors as "2 errors occurred:\n\t* permission denied\n\t* invalid token".
		m = errorsOccurred.ReplaceAllString(m, "")
		for part := range strings.SplitSeq(m, "*") {
			if part = strings.Join(strings.Fields(part), " "); part != "" {
				msgs = append(msgs, part)
			}
		}
	}
	msg := fmt.Sprintf("Vault answered %d", re.StatusCode)
	if len(msgs) > 0 {
		msg += ": " + strings.Join(msgs, "; ")
	}
	return &vaultError{msg: msg, err: err}
}
