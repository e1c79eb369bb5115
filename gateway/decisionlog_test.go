package gateway_test

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// TestOpenDecisionLog: decision_log_chain reaches the log: the checkpoint key is created beside
// it (private, with its public half), checkpoints are signed with it, the partition is the
// configured one, and checkpoints come every checkpoint_entries entries (and at Close).
func TestOpenDecisionLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := gateway.Config{DecisionLog: filepath.Join(dir, "logs", "decisions.db"),
		DecisionLogChain: gateway.ChainConfig{Partition: "gw-7", CheckpointInterval: time.Hour, CheckpointEntries: 2, Retention: 90 * 24 * time.Hour}}
	l, err := gateway.OpenDecisionLog(ctx, cfg, filepath.Join(dir, "unused"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d1", "d2", "d3"} {
		if err := l.Record(ctx, &decisionlog.Event{DecisionID: id, Action: "tools/call", Outcome: authz.OutcomeAllow}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, "logs", "checkpoint.key")
	info, err := os.Stat(keyPath)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("checkpoint key: %v %v", info, err)
	}
	pubPEM, err := os.ReadFile(keyPath + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := decisionlog.ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decisionlog.OpenReader(cfg.DecisionLog)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rep, err := r.Verify(ctx, decisionlog.VerifyOptions{PublicKeys: []ed25519.PublicKey{pub}})
	if err != nil || !rep.OK || len(rep.Partitions) != 1 || rep.Partitions[0].Partition != "gw-7" || rep.Partitions[0].Checkpoints != 2 ||
		rep.Uncovered != 0 {
		t.Fatalf("verify: %+v %v", rep, err)
	}

	for _, bad := range []gateway.ChainConfig{{Retention: -time.Hour}, {CheckpointEntries: -1}} {
		cfg.DecisionLogChain = bad
		if _, err := gateway.OpenDecisionLog(ctx, cfg, dir); err == nil || !strings.Contains(err.Error(), "decision_log_chain") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	cfg.DecisionLogChain = gateway.ChainConfig{CheckpointKey: filepath.Join(dir, "bad.key")}
	os.WriteFile(cfg.DecisionLogChain.CheckpointKey, []byte("not a key"), 0o600)
	if _, err := gateway.OpenDecisionLog(ctx, cfg, dir); err == nil || !strings.Contains(err.Error(), "checkpoint_key") {
		t.Errorf("bad key: %v", err)
	}
}
