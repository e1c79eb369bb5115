package main

import (
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/policies/decisionlog"
)

func newAuditVerifyCmd() *cobra.Command {
	var (
		f       auditFlags
		keys    []string
		part    string
		quietly bool
		strict  bool
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Prove the decision log complete and unaltered up to its last checkpoint, or name the first broken entry",
		Long: `Verify recomputes the decision log's hash chain: every event, completion and retention record
is chained to the one before it (per partition), so a changed, removed, inserted or reordered
entry breaks the chain from there on. It also checks that each event's query columns match its
document, that every checkpoint's Ed25519 signature is valid and its head is in the chain with
the hash it signed (so a chain rewritten or cut off below a checkpoint is found).

What it vouches for: every entry up to the last checkpoint of each partition is there and
unaltered. Entries after the last checkpoint are hash-chained, but no signature covers them:
cutting them off could not be told from a log that ended there (and someone who recomputes the
chain could rewrite them). Verify counts them and says so. A gateway that stops cleanly signs
its last entry; one that is killed leaves the entries since its last checkpoint (at most
decision_log_chain.checkpoint_interval, 1m, or checkpoint_entries, 1000, of them).
--strict fails (exit 1) when there are any.

Entries deleted by retention are recorded in the chain: the log still verifies from the first
entry kept.

--public-key pins the key checkpoints must be signed with (the checkpoint.key.pub written beside
the private key): without it, signatures are checked against the key each checkpoint carries and
the report names the keys.

Exit codes: 0 the log verifies, 1 it is broken (the first broken entry is named), or with
--strict entries after the last checkpoint cannot be vouched for, 2 usage error, 3 the log
cannot be read.`,
		Example: `  lushctl audit verify
  lushctl audit verify --strict --public-key .lush/checkpoint.key.pub
  lushctl audit verify --public-key .lush/checkpoint.key.pub -o json
  lushctl audit verify --log postgres://lush@db/lush --partition gw-1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			var pins []ed25519.PublicKey
			for _, k := range keys {
				data, err := os.ReadFile(k)
				if err != nil {
					return usage("--public-key: %v", err)
				}
				pub, err := decisionlog.ParsePublicKey(data)
				if err != nil {
					return usage("--public-key %s: %v", k, err)
				}
				pins = append(pins, pub)
			}
			r, err := f.openLog()
			if err != nil {
				return err
			}
			defer r.Close()
			opts := decisionlog.VerifyOptions{PublicKeys: pins, Partition: part}
			start := time.Now()
			if !quietly {
				opts.Progress = func(p string, pos int64) {
					fmt.Fprintf(cmd.ErrOrStderr(), "verifying %s: %d entries (%s)\n", p, pos, time.Since(start).Round(time.Second))
				}
			}
			rep, err := r.Verify(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if f.output == "json" {
				if err := writeJSON(cmd.OutOrStdout(), rep); err != nil {
					return err
				}
			} else {
				printVerify(cmd.OutOrStdout(), r.Path(), rep, len(pins) > 0)
			}
			switch {
			case !rep.OK:
				return &exitError{code: exitFailed}
			case strict && rep.Uncovered > 0:
				return failed("--strict: %s after the last checkpoint cannot be vouched for", entries(rep.Uncovered))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.log, "log", "", "decision log file or postgres:// URL (default $LUSH_DECISION_LOG, else "+defaultDecisionLog+")")
	fl.StringArrayVar(&keys, "public-key", nil, "PEM public key checkpoints must be signed with (repeatable)")
	fl.StringVar(&part, "partition", "", "verify only this partition")
	fl.BoolVarP(&quietly, "quiet", "q", false, "no progress on stderr")
	fl.BoolVar(&strict, "strict", false, "fail (exit 1) when entries after the last checkpoint cannot be vouched for")
	outputFlag(cmd, &f.output)
	return cmd
}

// entries is n entries, in words.
func entries(n int64) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}

// verdict is what a report vouches for, in one line.
func verdict(rep *decisionlog.VerifyReport) string {
	switch {
	case !rep.OK:
		return "BROKEN"
	case rep.Uncovered == 0:
		return "verified: complete and unaltered up to the last checkpoint, and nothing comes after it"
	}
	return fmt.Sprintf("verified: complete and unaltered up to the last checkpoint; %s after it cannot be vouched for "+
		"(hash-chained, but they could have been cut off)", entries(rep.Uncovered))
}

// lastCheckpoint says where p's last checkpoint is, and what comes after it.
func lastCheckpoint(p decisionlog.PartitionReport) string {
	s, after := "no checkpoint yet", ""
	if c := p.LastCheckpoint; c != nil {
		s, after = fmt.Sprintf("last checkpoint: position %d at %s", c.Pos, c.Timestamp.Format(time.RFC3339)), " after it"
	}
	if p.Uncovered == 0 {
		return s + "; nothing after it"
	}
	return s + fmt.Sprintf("; %s%s (positions %d..%d) cannot be vouched for: hash-chained, but they could have been cut off",
		entries(p.Uncovered), after, p.Last-p.Uncovered+1, p.Last)
}

func printVerify(w io.Writer, where string, rep *decisionlog.VerifyReport, pinned bool) {
	fmt.Fprintf(w, "decision log %s: %s\n", where, verdict(rep))
	for _, p := range rep.Partitions {
		fmt.Fprintf(w, "  partition %s: positions %d..%d: %d events, %d completions, %d retention records\n",
			p.Partition, p.First, p.Last, p.Events, p.Completions, p.Markers)
		if p.Problem != nil {
			fmt.Fprintf(w, "    first broken entry: %s\n", p.Problem)
			continue
		}
		if p.Retention != nil {
			fmt.Fprintf(w, "    retention deleted positions below %d (segments up to the checkpoint of %s)\n",
				p.Retention.Below, p.Retention.Checkpoint.Format(time.RFC3339))
		}
		keys := "no key"
		if len(p.Keys) > 0 {
			keys = "key " + strings.Join(p.Keys, ", key ")
		}
		pin := " (not pinned: pass --public-key to require a key)"
		if pinned {
			pin = " (pinned)"
		}
		fmt.Fprintf(w, "    %d signed checkpoints, by %s%s", p.Checkpoints, keys, pin)
		if p.Unsigned > 0 {
			fmt.Fprintf(w, "; %d unsigned", p.Unsigned)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "    %s\n", lastCheckpoint(p))
	}
}

func newAuditRetainCmd() *cobra.Command {
	var (
		f         auditFlags
		olderThan time.Duration
		keyPath   string
		part      string
	)
	cmd := &cobra.Command{
		Use:   "retain --older-than DURATION [--partition P]",
		Short: "Delete the decision log's segments older than a retention period, recording it in the chain",
		Long: `Retain applies a retention period now (the gateway applies decision_log_chain.retention by
itself after each checkpoint): it deletes every entry up to the newest checkpoint taken before
now minus --older-than (whole segments), and appends a retention record to the chain naming the
first entry kept and the hash before it, so that ` + "`lushctl audit verify`" + ` still passes.

It writes the log, next to a running gateway if need be (each transaction extends the chain's
current head). Exit codes: 0 done (also when nothing had expired), 2 usage error, 3 the log
cannot be written.`,
		Example: `  lushctl audit retain --older-than 2160h`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			if olderThan <= 0 {
				return usage("--older-than must be a positive duration (2160h is 90 days), not %s", olderThan)
			}
			path := f.logPath()
			if !decisionlog.IsPostgres(path) {
				if _, err := os.Stat(path); err != nil {
					return fmt.Errorf("no decision log at %s: %w", path, err)
				}
			}
			if keyPath == "" {
				if decisionlog.IsPostgres(path) {
					return usage("--checkpoint-key is required with a PostgreSQL log: the key the gateways sign checkpoints with")
				}
				keyPath = filepath.Join(filepath.Dir(path), "checkpoint.key")
			}
			if _, err := os.Stat(keyPath); err != nil {
				return usage("--checkpoint-key: %v (the key the gateway signs checkpoints with)", err)
			}
			key, err := decisionlog.LoadOrCreateSigningKey(keyPath)
			if err != nil {
				return err
			}
			opts := []decisionlog.Option{decisionlog.CheckpointEvery(0), decisionlog.SigningKey(key)}
			if part != "" {
				opts = append(opts, decisionlog.Partition(part))
			}
			l, err := decisionlog.Open(cmd.Context(), path, opts...)
			if err != nil {
				return err
			}
			where := l.Path() // without a PostgreSQL URL's password
			rec, err := l.Retain(cmd.Context(), time.Now().Add(-olderThan))
			if cerr := l.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if f.output == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"retention": rec})
			}
			if rec == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "nothing to delete: no segment of %s closed before %s\n", where, time.Now().Add(-olderThan).Format(time.RFC3339))
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %d events, %d completions, %d retention records (positions below %d); recorded in the chain\n",
				rec.Events, rec.Completions, rec.Markers, rec.Below)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.log, "log", "", "decision log file or postgres:// URL (default $LUSH_DECISION_LOG, else "+defaultDecisionLog+")")
	fl.DurationVar(&olderThan, "older-than", 0, "the retention period: delete segments that closed before now minus this")
	fl.StringVar(&keyPath, "checkpoint-key", "", "the key checkpoints are signed with (default checkpoint.key beside the log)")
	fl.StringVar(&part, "partition", "", "the partition to apply it to (default "+decisionlog.DefaultPartition+"; a PostgreSQL log: this host's name)")
	outputFlag(cmd, &f.output)
	return cmd
}
