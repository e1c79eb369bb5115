package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/jsonlimit"
	"github.com/lush-agents/lush/internal/toolref"
	"github.com/lush-agents/lush/mesh/extauthz"
	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/vault"
)

// Config is the gateway's configuration. It maps one-to-one onto its YAML file
// (docs/gateway.md); flags of `lushctl gateway` override it.
type Config struct {
	Listen      string     `yaml:"listen"`       // default 127.0.0.1:8080
	Environment string     `yaml:"environment"`  // input.environment; default "dev"
	LiveWrites  LiveWrites `yaml:"live_writes"`  // "all", or a list of tool references
	DecisionLog string     `yaml:"decision_log"` // SQLite file or postgres:// URL; default <project>/.lush/decisions.db
	// DecisionLogChain: the log's hash chain partition, checkpoints and retention (docs/audit.md).
	DecisionLogChain ChainConfig     `yaml:"decision_log_chain"`
	SessionKeyFile   string          `yaml:"session_key_file"` // shared by replicas; default: a key per process
	AllowedHosts     []string        `yaml:"allowed_hosts"`    // host names clients may use besides loopback ones
	MaxBodyBytes     int64           `yaml:"max_body_bytes"`   // default 4 MiB
	Auth             identity.Config `yaml:"auth"`
	Credentials      vault.Config    `yaml:"credentials"` // where upstream credentials come from (docs/credentials.md)
	Upstreams        UpstreamConfig  `yaml:"upstreams"`
	Bundles          BundleConfig    `yaml:"bundles"`
	Agents           AgentsConfig    `yaml:"agents"` // where agentd serves the agents lush:// tools name
	// ExtAuthz, when it names an address or a socket, serves Envoy's ext_authz Check with the
	// same policy and decision log (docs/mesh.md).
	ExtAuthz extauthz.Config `yaml:"ext_authz"`
	// Builtins configures the tools built into Lush (builtin/shell).
	Builtins BuiltinsConfig `yaml:"builtins"`
	// Approvals says how calls that need a person's approval wait for one.
	Approvals approval.Config `yaml:"approvals"`
	// Limits bound what is decided (docs/gateway.md#argument-limits).
	Limits LimitsConfig `yaml:"limits"`
	// Sessions bounds what sessions and their streams hold (docs/gateway.md#replicas-and-sessions).
	Sessions SessionsConfig `yaml:"sessions"`
}

// LimitsConfig bounds what the process's enforcement points decide.
type LimitsConfig struct {
	// Arguments bounds the arguments of a tools/call before they are decoded, at every
	// enforcement point of the process: the gateway, ext_authz, and agentd's agent tools.
	Arguments jsonlimit.Limits `yaml:"arguments"`
	// DecisionTimeout bounds one evaluation of the policy; a decision that takes longer denies
	// the call (default authz.DefaultTimeout, 500ms; at most MaxDecisionTimeout).
	DecisionTimeout time.Duration `yaml:"decision_timeout"`
}

// SessionsConfig bounds the streamable HTTP sessions and streams of one process. Zero values are
// the defaults.
type SessionsConfig struct {
	TTL                  time.Duration `yaml:"ttl"`                     // a session's life from its initialize; default 24h
	MaxStreams           int           `yaml:"max_streams"`             // open SSE streams; default 10,000
	MaxStreamsPerSession int           `yaml:"max_streams_per_session"` // GET streams of one session; default 4
	MaxTerminated        int           `yaml:"max_terminated"`          // DELETEd sessions remembered until they expire; default 100,000
	// StreamAfter: a tools/call of a 2025-11-25 session still running after this long is
	// answered on a primed SSE stream (event ids, a retry hint); default 50ms. PollAfter: primed
	// streams are resumable, and one still open after this long is ended, the call goes on and
	// the client resumes it (GET, Last-Event-ID) on the same replica; default 0, never.
	StreamAfter time.Duration `yaml:"stream_after"`
	PollAfter   time.Duration `yaml:"poll_after"`
}

// DefaultStreamAfter is sessions.stream_after's default.
const DefaultStreamAfter = 50 * time.Millisecond

// MaxDecisionTimeout is the longest limits.decision_timeout: a call waits for its decision.
const MaxDecisionTimeout = time.Minute

// ArgumentLimits are the limits of a call's arguments, with defaults, that name their setting in
// errors ("gateway config limits.arguments.max_depth").
func (c Config) ArgumentLimits() jsonlimit.Limits {
	lim := c.Limits.Arguments.WithDefaults()
	lim.Setting = "gateway config limits.arguments"
	return lim
}

// UpstreamConfig tunes the connections to MCP servers.
type UpstreamConfig struct {
	CallTimeout    time.Duration `yaml:"call_timeout"`    // default 60s (a server's timeout in lush.yaml wins)
	HealthInterval time.Duration `yaml:"health_interval"` // default 10s
	BackoffInitial time.Duration `yaml:"backoff_initial"` // default 200ms
	BackoffMax     time.Duration `yaml:"backoff_max"`     // default 30s
	NodePrefixes   []string      `yaml:"node_prefixes"`   // npm prefixes holding installed MCP servers
	// PrivateIdle: a server connected with one principal's credential is stopped after this long
	// unused (default 10m).
	PrivateIdle time.Duration `yaml:"private_idle"`
}

// ChainConfig tunes the decision log's hash chain.
type ChainConfig struct {
	// Partition names this writer's chain; replicas sharing a PostgreSQL log each need their own
	// (default "local" for SQLite; the host name for PostgreSQL).
	Partition string `yaml:"partition"`
	// CheckpointInterval: how often the chain head is signed (default 1m); it is also the
	// granularity of retention.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// CheckpointEntries: the chain head is also signed once this many entries follow the last
	// checkpoint (default decisionlog.DefaultCheckpointEntries, 1000), so that a gateway killed
	// between checkpoints leaves fewer entries that verify cannot vouch for.
	CheckpointEntries int `yaml:"checkpoint_entries"`
	// CheckpointKey is the Ed25519 private key (PKCS #8 PEM) that signs checkpoints; created,
	// with its public key beside it (.pub), when missing. Default: checkpoint.key beside a SQLite
	// log, <project>/.lush/checkpoint.key for PostgreSQL.
	CheckpointKey string `yaml:"checkpoint_key"`
	// Retention deletes whole segments older than this, recording the deletion in the chain
	// (default 0: keep everything).
	Retention time.Duration `yaml:"retention"`
}

// OpenDecisionLog opens the decision log cfg names (a SQLite file or a postgres:// URL) with its
// chain settings; keyDir is where the checkpoint key is kept by default for PostgreSQL.
func OpenDecisionLog(ctx context.Context, cfg Config, keyDir string) (*decisionlog.Log, error) {
	c := cfg.DecisionLogChain
	if c.CheckpointInterval < 0 || c.CheckpointEntries < 0 || c.Retention < 0 {
		return nil, errors.New("gateway config: decision_log_chain: checkpoint_interval, checkpoint_entries and retention must not be negative")
	}
	keyPath := c.CheckpointKey
	if keyPath == "" {
		if decisionlog.IsPostgres(cfg.DecisionLog) {
			keyPath = filepath.Join(keyDir, "checkpoint.key")
		} else {
			keyPath = filepath.Join(filepath.Dir(cfg.DecisionLog), "checkpoint.key")
		}
	}
	key, err := decisionlog.LoadOrCreateSigningKey(keyPath)
	if err != nil {
		return nil, fmt.Errorf("gateway config: decision_log_chain.checkpoint_key: %w", err)
	}
	opts := []decisionlog.Option{decisionlog.SigningKey(key), decisionlog.RetentionPeriod(c.Retention)}
	if c.CheckpointInterval > 0 {
		opts = append(opts, decisionlog.CheckpointEvery(c.CheckpointInterval))
	}
	if c.CheckpointEntries > 0 {
		opts = append(opts, decisionlog.CheckpointEntries(c.CheckpointEntries))
	}
	if c.Partition != "" {
		opts = append(opts, decisionlog.Partition(c.Partition))
	}
	l, err := decisionlog.Open(ctx, cfg.DecisionLog, opts...)
	if err != nil {
		return nil, fmt.Errorf("open decision log: %w", err)
	}
	return l, nil
}

// BundleConfig says which bundles the gateway accepts.
type BundleConfig struct {
	// VerificationKey, when set, is a PEM public key (or an HMAC secret file for HS*) that must
	// have signed every bundle: unsigned or badly signed bundles are refused.
	VerificationKey string `yaml:"verification_key"`
	KeyID           string `yaml:"key_id"`    // default "default"
	Algorithm       string `yaml:"algorithm"` // default RS256
}

// LiveWrites says which write tools really run. The zero value: none (every write is stubbed).
type LiveWrites struct {
	All   bool
	Tools []string
}

// Live reports whether writes to a tool run for real.
func (l LiveWrites) Live(ref string) bool { return l.All || slices.Contains(l.Tools, ref) }

// UnmarshalYAML accepts "all", a list of tool references, or nothing.
func (l *LiveWrites) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.Value {
		case "all":
			l.All = true
		case "", "none", "false":
		default:
			return fmt.Errorf("line %d: live_writes must be \"all\", \"none\" or a list of tool references", n.Line)
		}
		return nil
	case yaml.SequenceNode:
		return n.Decode(&l.Tools)
	}
	return fmt.Errorf("line %d: live_writes must be \"all\", \"none\" or a list of tool references", n.Line)
}

// Defaults.
const (
	DefaultListen      = "127.0.0.1:8080"
	DefaultEnvironment = "dev"
)

// LoadConfig reads a YAML config file. Unknown fields are errors that name their line.
func LoadConfig(path string) (Config, error) {
	var c Config
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read gateway config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("gateway config %s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return c, nil
}

// WithDefaults fills unset fields: the listen address, the environment, the bundle key id and algorithm.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Environment == "" {
		c.Environment = DefaultEnvironment
	}
	if c.Bundles.KeyID == "" {
		c.Bundles.KeyID = "default"
	}
	if c.Bundles.Algorithm == "" {
		c.Bundles.Algorithm = "RS256"
	}
	return c
}

// Validate checks the config and names the field at fault. The auth: section is checked by
// identity.New, which builds the authenticator from it.
func (c Config) Validate() error {
	var problems []string
	for i, ref := range c.LiveWrites.Tools {
		if _, err := toolref.Parse(ref); err != nil {
			problems = append(problems, fmt.Sprintf("live_writes[%d]: %v", i, err))
		}
	}
	if u := c.Agents.URL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		problems = append(problems, fmt.Sprintf("agents.url: %q is not an http:// or https:// URL", u))
	}
	if c.Agents.Timeout < 0 {
		problems = append(problems, "agents.timeout: must not be negative")
	}
	if c.MaxBodyBytes < 0 {
		problems = append(problems, "max_body_bytes: must be positive")
	}
	if ss := c.Sessions; ss.TTL < 0 || ss.MaxStreams < 0 || ss.MaxStreamsPerSession < 0 || ss.MaxTerminated < 0 || ss.StreamAfter < 0 || ss.PollAfter < 0 {
		problems = append(problems, "sessions: ttl, max_streams, max_streams_per_session, max_terminated, stream_after and poll_after must not be negative")
	}
	if err := c.Credentials.Check(); err != nil {
		problems = append(problems, err.Error())
	}
	if err := c.Approvals.Validate(); err != nil {
		problems = append(problems, err.Error())
	}
	if t := c.Limits.DecisionTimeout; t < 0 || t > MaxDecisionTimeout {
		problems = append(problems, fmt.Sprintf("limits.decision_timeout: %s is not between 0 (the default, %s) and %s", t, authz.DefaultTimeout, MaxDecisionTimeout))
	}
	if err := c.Limits.Arguments.Validate("limits.arguments"); err != nil {
		problems = append(problems, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if err := c.ExtAuthz.Validate(); err != nil {
		problems = append(problems, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if len(problems) > 0 {
		return errors.New("gateway config: " + strings.Join(problems, "; "))
	}
	return nil
}
