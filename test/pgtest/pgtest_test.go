package pgtest

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestStart(t *testing.T) {
	t.Parallel()
	var (
		c    *Cluster
		pid  int
		addr string
	)
	// The cluster belongs to the sub-test, so its t.Cleanup (stop, delete) has run when
	// t.Run returns: the checks after it exercise the real cleanup path.
	t.Run("cluster", func(t *testing.T) {
		c = Start(t)
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port))
		pid = postmasterPID(c.dataDir)
		if pid == 0 {
			t.Fatal("no postmaster.pid after Start")
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		const name = "lush test-db" // needs quoting in SQL and escaping in the DSN
		dsn := c.CreateDatabase(t, name)
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connecting to %s: %v", dsn, err)
		}
		defer conn.Close(context.Background())

		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("SELECT 1 = %d, %v", one, err)
		}
		var db string
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil || db != name {
			t.Fatalf("current_database() = %q, %v; want %q", db, err, name)
		}
		var listen string
		if err := conn.QueryRow(ctx, "SHOW listen_addresses").Scan(&listen); err != nil || listen != "127.0.0.1" {
			t.Fatalf("listen_addresses = %q, %v; want 127.0.0.1 only", listen, err)
		}
	})
	if c == nil || t.Failed() {
		return // skipped (no PostgreSQL) or failed
	}

	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after the cluster stopped", addr)
	}
	if alive(pid) {
		t.Errorf("postmaster %d survived the cluster", pid)
	}
	if _, err := os.Stat(c.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cluster directory %s survived: %v", c.dir, err)
	}
}

func TestStartTwice(t *testing.T) {
	t.Parallel()
	// Two clusters side by side get distinct ports and directories, and stopping one
	// leaves the other running.
	a, b := Start(t), Start(t)
	if a.port == b.port || a.dir == b.dir {
		t.Fatalf("clusters share port %d/%d or directory %s/%s", a.port, b.port, a.dir, b.dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ping := func(c *Cluster) error {
		conn, err := pgx.Connect(ctx, c.DSN())
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		return conn.Ping(ctx)
	}
	for _, c := range []*Cluster{a, b} {
		if err := ping(c); err != nil {
			t.Fatalf("%s: %v", c.DSN(), err)
		}
	}

	// stop is idempotent: the cleanup's call after these is a no-op.
	for range 2 {
		if err := a.stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
	}
	if err := ping(a); err == nil {
		t.Errorf("%s still answers after stop", a.DSN())
	}
	if err := ping(b); err != nil {
		t.Errorf("stopping one cluster broke the other: %v", err)
	}
}
