package test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lush-agents/lush/test/syncbuf"
)

var lushctlBin string // built once by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lush-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lushctlBin = filepath.Join(dir, "lushctl")
	if out, err := exec.Command("go", "build", "-race", "-o", lushctlBin, "../cmd/lushctl").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build lushctl: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// nodeTools is the project-local npm prefix that make test fills (.tools/node).
func nodeTools(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("LUSH_NODE_PREFIX")
	if dir == "" {
		dir, _ = filepath.Abs("../.tools/node")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", "node")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("npm tools are not installed in %s: run the tests with make test", dir)
		}
		t.Skip("npm tools not installed (make node-tools)")
	}
	return dir
}

// node22 is Node 22 from the npm package node@22.
func node22(t *testing.T) string {
	return filepath.Join(nodeTools(t), "node_modules", ".bin", "node")
}

// proc is a process a test started; it is killed (with its children) when the test ends.
type proc struct {
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
}

func startProc(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	return startCmd(t, cmd)
}

// startCmd starts cmd in its own process group (keeping its SysProcAttr otherwise), collecting
// its output; it is killed (with its children) when the test ends.
func startCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	name := cmd.Path
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	p := &proc{cmd: cmd, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("output of %s:\n%s", filepath.Base(name), p.out.String())
		}
	})
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("process did not stop on SIGTERM:\n%s", p.out.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// freePort returns a free loopback port.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startEverything runs the npm server-everything over streamable HTTP on loopback and returns its
// URL.
func startEverything(t *testing.T) string {
	t.Helper()
	tools := nodeTools(t)
	port := freePort(t)
	p := startProc(t, []string{fmt.Sprintf("PORT=%d", port)}, node22(t), "--import", mustAbs(t, "node/loopback.mjs"),
		filepath.Join(tools, "node_modules/@modelcontextprotocol/server-everything/dist/index.js"), "streamableHttp")
	waitFor(t, p, "listening on port", 30*time.Second)
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// waitFor waits until a process has printed s.
func waitFor(t *testing.T, p *proc, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(p.out.String(), s) {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("process exited before printing %q:\n%s", s, p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("process did not print %q within %s:\n%s", s, d, p.out.String())
}

// startGateway runs `lushctl gateway` with args on a free loopback port and returns its base URL.
func startGateway(t *testing.T, dir string, args ...string) (string, *proc) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	all := append([]string{"gateway", "--listen", "127.0.0.1:0", "--ready-file", ready, "--node-prefix", nodeTools(t)}, args...)
	p := startProc(t, nil, lushctlBin, append(all, dir)...)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if addr, err := os.ReadFile(ready); err == nil && len(addr) > 0 {
			return "http://" + string(addr), p
		}
		select {
		case <-p.done:
			t.Fatalf("gateway exited:\n%s", p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("gateway did not start:\n%s", p.out.String())
	return "", nil
}

// runNode runs a node script and returns its stdout lines.
func runNode(t *testing.T, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node22(t), args...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(nodeTools(t), "node_modules"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %v: %v\n%s", args, err, stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
