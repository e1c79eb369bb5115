package decisionlog

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Option configures Open.
type Option func(*config) error

type config struct {
	batchSize   int
	batchDelay  time.Duration
	asyncDelay  time.Duration // how long completions alone wait for a write that waits
	queueSize   int
	synchronous string
	clock       func() time.Time
	busyTimeout time.Duration
	onConn      func(context.Context, *sql.Conn) error // tests: runs on the writer's connection after setup

	partition         string
	signingKey        ed25519.PrivateKey
	checkpointEvery   time.Duration
	checkpointEntries int
	retention         time.Duration
	retentionChunk    int
}

// defaultConfig is the config of a log opened without options (but Open names a PostgreSQL
// log's partition after its host).
func defaultConfig() config {
	return config{batchSize: 512, batchDelay: time.Millisecond, asyncDelay: 2 * time.Millisecond, queueSize: 8192, synchronous: "normal",
		clock: time.Now, busyTimeout: 5 * time.Second, partition: DefaultPartition, checkpointEvery: time.Minute,
		checkpointEntries: DefaultCheckpointEntries, retentionChunk: defaultRetentionChunk}
}

// defaultRetentionChunk bounds the rows of each table one retention pass deletes, so that a
// large expired segment is deleted over several transactions and writes go on between them.
const defaultRetentionChunk = 2000

// Partition sets the hash chain partition this log writes (default DefaultPartition). Writers
// sharing a partition extend one chain, one transaction at a time; give each gateway replica
// its own partition on a shared PostgreSQL store so that they do not wait on each other.
func Partition(name string) Option {
	return func(c *config) error {
		if name == "" || len(name) > 128 {
			return fmt.Errorf("Partition must be 1 to 128 bytes, not %q", name)
		}
		c.partition = name
		return nil
	}
}

// SigningKey sets the Ed25519 key that signs checkpoints (see LoadOrCreateSigningKey). Without
// one, checkpoints are unsigned: they still bound segments for retention, but only a signed
// checkpoint shows that the chain before it was not rewritten.
func SigningKey(key ed25519.PrivateKey) Option {
	return func(c *config) error {
		if len(key) != ed25519.PrivateKeySize {
			return fmt.Errorf("SigningKey must be an Ed25519 private key")
		}
		c.signingKey = key
		return nil
	}
}

// CheckpointEvery sets how often the log checkpoints its chain head when something was written
// since the last checkpoint (default 1m; 0 checkpoints only on Close and on Checkpoint).
// Checkpoints also bound the segments retention deletes.
func CheckpointEvery(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("CheckpointEvery must not be negative, not %s", d)
		}
		c.checkpointEvery = d
		return nil
	}
}

// DefaultCheckpointEntries is how many entries at most a log leaves after its last checkpoint
// when CheckpointEntries is not given.
const DefaultCheckpointEntries = 1000

// CheckpointEntries bounds the entries after the last checkpoint by count, as CheckpointEvery
// bounds them by time: the transaction that takes the chain n or more entries past the last
// checkpoint signs its head too (default DefaultCheckpointEntries; 0: no bound by count). Entries
// after the last checkpoint are what Verify cannot vouch for (they could be cut off unnoticed),
// and a process that dies between checkpoints leaves them so.
func CheckpointEntries(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("CheckpointEntries must not be negative, not %d", n)
		}
		c.checkpointEntries = n
		return nil
	}
}

// RetentionPeriod makes the log delete, after each checkpoint, the segments whose closing
// checkpoint is older than d (0, the default, keeps everything). Each deletion is recorded in
// the chain, so the rest still verifies.
func RetentionPeriod(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("RetentionPeriod must not be negative, not %s", d)
		}
		c.retention = d
		return nil
	}
}

// BatchSize sets the most events (and completions) one transaction commits; default 512.
func BatchSize(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("BatchSize must be at least 1, not %d", n)
		}
		c.batchSize = n
		return nil
	}
}

// BatchDelay bounds how long the writer keeps filling a batch while events keep arriving;
// default 1ms. An idle writer, or one that finds the queue empty, commits at once.
func BatchDelay(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("BatchDelay must not be negative, not %s", d)
		}
		c.batchDelay = d
		return nil
	}
}

// CompletionDelay bounds how long a batch of nothing but queued completions (CompleteAsync,
// whose callers do not wait) waits for a write that someone waits for, such as the next
// decision, to commit with it in one transaction; default 2ms, 0 commits them at once. Under a
// light load it halves the transactions: each call's completion rides with the next decision.
// Decisions, Complete, Sync, Close and completions that charge a budget never wait for it.
func CompletionDelay(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("CompletionDelay must not be negative, not %s", d)
		}
		c.asyncDelay = d
		return nil
	}
}

// QueueSize sets how many writes may wait for the writer; default 8192. When the queue is full,
// Record, Complete and CompleteAsync fail at once with ErrBackpressure: they never block on a
// full queue and never drop.
func QueueSize(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("QueueSize must be at least 1, not %d", n)
		}
		c.queueSize = n
		return nil
	}
}

// Synchronous sets SQLite's synchronous mode: "normal" (the default: with WAL, committed events
// survive a process crash but the last ones may be lost on power loss) or "full" (they survive
// power loss too, at the cost of an fsync per transaction).
func Synchronous(mode string) Option {
	return func(c *config) error {
		switch strings.ToLower(mode) {
		case "normal", "full":
			c.synchronous = strings.ToLower(mode)
			return nil
		}
		return fmt.Errorf(`Synchronous must be "normal" or "full", not %q`, mode)
	}
}

// Clock sets the clock that stamps events and completions without a Timestamp (tests).
func Clock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return errors.New("Clock must not be nil")
		}
		c.clock = now
		return nil
	}
}
