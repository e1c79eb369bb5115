package perf

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/mark3labs/mcp-go/server"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"

	"github.com/lush-agents/lush/test/mcpserver"
	"github.com/lush-agents/lush/test/syncbuf"
)

// The test binary doubles as the harness's helper processes: started with roleEnv set, it
// serves one role on a loopback port, prints "listening ADDR", and exits when its stdin closes
// (when the harness ends or dies), so that the CPU each one burns can be read from /proc.
const (
	roleEnv   = "LUSH_PERF_ROLE"
	targetEnv = "LUSH_PERF_TARGET"

	roleEcho  = "echo"       // the mcp-go echo server (test/mcpserver) over streamable HTTP at /mcp
	roleProxy = "proxy"      // a bare httputil.ReverseProxy in front of LUSH_PERF_TARGET
	roleNoop  = "noop-authz" // an ext_authz gRPC server that allows everything at once
)

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		if err := serveRole(role, os.Getenv(targetEnv)); err != nil {
			fmt.Fprintf(os.Stderr, "perf helper %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveRole serves role until stdin closes.
func serveRole(role, target string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	serve := func() error { return nil }
	switch role {
	case roleEcho:
		srv := &http.Server{Handler: server.NewStreamableHTTPServer(mcpserver.New()), ReadHeaderTimeout: 10 * time.Second}
		serve = func() error { return srv.Serve(ln) }
	case roleProxy:
		u, err := url.Parse(target)
		if err != nil || u.Host == "" {
			return fmt.Errorf("%s=%q: want the upstream's base URL, http://host:port", targetEnv, target)
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
		rp.FlushInterval = -1 // stream event-stream responses as the gateway does
		srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
		serve = func() error { return srv.Serve(ln) }
	case roleNoop:
		srv := grpc.NewServer()
		authv3.RegisterAuthorizationServer(srv, noop{})
		serve = func() error { return srv.Serve(ln) }
	default:
		return fmt.Errorf("%s=%q: want %s, %s or %s", roleEnv, role, roleEcho, roleProxy, roleNoop)
	}
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	fmt.Printf("listening %s\n", ln.Addr())
	stdin := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stdin) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-stdin:
		return nil
	}
}

// noop is the ext_authz baseline: it allows everything at once, so what it costs is the gRPC
// hop itself, which every ext_authz server pays.
type noop struct {
	authv3.UnimplementedAuthorizationServer
}

func (noop) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(code.Code_OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}}}, nil
}

// proc is a process the harness started; it is killed (with its children) when the test ends.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// startHelper starts the test binary in role and returns it with the address it listens on.
func startHelper(t testing.TB, role, target string) (*proc, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+role, targetEnv+"="+target)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, role, cmd)
	t.Cleanup(func() { stdin.Close() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("helper %s did not say where it listens (%q, %v):\n%s", role, line, err, p.out.String())
	}
	go io.Copy(io.Discard, stdout)
	return p, addr
}

// start starts cmd in its own process group, its output (stderr, and stdout unless the caller
// took it) collected; it is killed with its group when the test ends.
func start(t testing.TB, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &proc{name: name, cmd: cmd, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	if cmd.Stdout == nil { // StdoutPipe sets it
		cmd.Stdout = p.out
	}
	cmd.Stderr = p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, p.out.String())
		}
	})
	return p
}

// cpuTime is the user plus system CPU time that process pid has used so far (/proc/pid/stat,
// utime and stime in clock ticks of 1/100 s, Linux's USER_HZ).
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read the CPU time of process %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from after it.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("read the CPU time of process %d: malformed /proc stat %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("read the CPU time of process %d: malformed /proc stat %q", pid, s)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("read the CPU time of process %d: malformed /proc stat %q", pid, s)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}
