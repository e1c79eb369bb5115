// Package pgtest starts throwaway PostgreSQL clusters for tests.
//
// Start runs initdb and pg_ctl from an installed PostgreSQL (Debian's postgresql package:
// /usr/lib/postgresql/<N>/bin, or the binaries on PATH) on a free loopback port, tuned for
// speed rather than durability, and removes the cluster when the test ends. Without
// PostgreSQL installed the test is skipped, or fails when CI=true (`make test` installs it).
// PostgreSQL refuses to run as root, so when the tests run as root the server runs as the
// postgres system user.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a running PostgreSQL cluster owned by one test.
type Cluster struct {
	port    int
	dir     string // temporary directory holding the data directory and the server log
	dataDir string
	logFile string
	bin     string // directory holding initdb, pg_ctl and postgres
	cred    *syscall.Credential

	stopOnce sync.Once
	stopErr  error
}

const (
	startAttempts = 3 // a free port can be taken before the server binds it
	logTailLines  = 40
)

// Start starts a new cluster for the test and stops it (and deletes its files) in t.Cleanup.
// Without PostgreSQL installed it skips the test, unless CI=true, where it fails
// ("run make test, which installs postgresql").
func Start(t testing.TB) *Cluster {
	t.Helper()
	bin, err := findBinDir()
	if err != nil {
		missing(t, err.Error())
	}
	c := &Cluster{bin: bin}

	base := os.TempDir()
	if os.Getuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			missing(t, "PostgreSQL refuses to run as root and there is no postgres user to run it as: "+err.Error())
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("pgtest: postgres user: %v", err)
		}
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if !reachableByOthers(base) {
			base = "/tmp" // e.g. TMPDIR=/root/tmp, which the postgres user cannot enter
		}
	}
	dir, err := os.MkdirTemp(base, "pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	c.dir = dir
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("pgtest: removing the cluster: %v", err)
		}
	})
	if c.cred != nil {
		if err := chownAll(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	c.dataDir = filepath.Join(dir, "data")
	c.logFile = filepath.Join(dir, "server.log")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := c.run(ctx, "initdb", "-D", c.dataDir, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}

	// Registered before the first start attempt: a failed or timed-out pg_ctl start can
	// still leave a postmaster behind. Cleanups run last-in first-out, so the server stops
	// before its files are removed.
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		c.port = port
		_ = os.Remove(c.logFile) // judge each attempt by its own log
		opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off -c synchronous_commit=off"+
			" -c full_page_writes=off -c max_connections=200", port, c.dataDir)
		out, err := c.run(ctx, "pg_ctl", "-D", c.dataDir, "-w", "-t", "60", "-o", opts, "-l", c.logFile, "start")
		if err == nil {
			return c
		}
		log := c.logTail()
		if attempt < startAttempts && portClash(log) {
			continue
		}
		t.Fatalf("pgtest: pg_ctl start: %v\n%s\nserver log %s:\n%s", err, out, c.logFile, log)
	}
}

// DSN is the superuser's connection string for the postgres database (trust authentication
// on loopback, no TLS).
func (c *Cluster) DSN() string { return c.dsn("postgres") }

// CreateDatabase creates a database and returns its DSN.
func (c *Cluster) CreateDatabase(t testing.TB, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatalf("pgtest: connecting to %s: %v", c.DSN(), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating database %q: %v", name, err)
	}
	return c.dsn(name)
}

func (c *Cluster) dsn(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// stop stops the server; the second and later calls return the first call's result.
func (c *Cluster) stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.doStop() })
	return c.stopErr
}

func (c *Cluster) doStop() error {
	pid := postmasterPID(c.dataDir)
	if pid == 0 {
		return nil // never started, or already gone
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, stopErr := c.run(ctx, "pg_ctl", "-D", c.dataDir, "-m", "immediate", "-w", "-t", "30", "stop")
	if stopErr == nil && !alive(pid) {
		return nil
	}
	// pg_ctl failed, or the postmaster outlived it: kill it and its children outright.
	for _, p := range append(childPIDs(pid), pid) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("postmaster %d survived SIGKILL (pg_ctl stop: %v %s)", pid, stopErr, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// run runs a PostgreSQL program from c.bin, as the postgres user when we are root, and
// returns its combined output.
func (c *Cluster) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, prog), args...)
	cmd.Dir = c.dir // the postgres user may not be allowed into our working directory
	cmd.Env = serverEnv(c.dir)
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	// pg_ctl start leaves the postmaster holding copies of stdout/stderr; pipes would then
	// keep Wait from returning, so bound the wait after pg_ctl itself exits.
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// serverEnv is our environment without PG* variables (PGDATA, PGPORT, … would steer the
// programs elsewhere) and with a HOME the postgres user can enter.
func serverEnv(home string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "HOME=")
	})
	return append(env, "HOME="+home)
}

func (c *Cluster) logTail() string {
	b, err := os.ReadFile(c.logFile)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}

func portClash(log string) bool {
	return strings.Contains(log, "Address already in use") ||
		strings.Contains(log, "could not bind") ||
		strings.Contains(log, "could not create any TCP/IP sockets")
}

// findBinDir finds the directory with initdb and pg_ctl: PATH first, then the newest
// /usr/lib/postgresql/<N>/bin.
func findBinDir() (string, error) {
	if initdb, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(initdb)
		if isExecutable(filepath.Join(dir, "pg_ctl")) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) float64 {
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		if err != nil {
			return -1
		}
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int {
		va, vb := version(a), version(b)
		switch {
		case va > vb:
			return -1
		case va < vb:
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, dir := range dirs {
		if isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "pg_ctl")) {
			return dir, nil
		}
	}
	return "", errors.New("PostgreSQL is not installed: no initdb and pg_ctl on PATH or in /usr/lib/postgresql/*/bin")
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// missing skips the test, or fails it in CI, where PostgreSQL must be installed.
func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("pgtest: %s; run make test, which installs postgresql", why)
	}
	t.Skipf("pgtest: %s (make test installs postgresql)", why)
}

// reachableByOthers reports whether every directory from / to dir lets others search it,
// so that the postgres user can reach a directory we create inside.
func reachableByOthers(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

func chownAll(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// postmasterPID reads the postmaster's pid from the first line of postmaster.pid; 0 if
// there is none.
func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if state, _, ok := procStat(pid); ok {
		return state != 'Z' && state != 'X'
	}
	return true
}

// childPIDs lists the children of pid from /proc (none where there is no /proc).
func childPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, ok := procStat(p); ok && ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}

// procStat reads a process's state and parent pid from /proc/<pid>/stat.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 2 || len(fields[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	if err != nil {
		return 0, 0, false
	}
	return fields[0][0], ppid, true
}
