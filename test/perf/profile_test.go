package perf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// profileEnv names a directory: with it, the harness builds lushctl with profileHook and writes,
// for each gateway's ext_authz run, its CPU profile and the allocations made during the run
// (LUSH_PERF_PROFILE=/tmp/prof; then `go tool pprof -top /tmp/prof/<gateway>/cpu-1.pprof`, and
// `go tool pprof -sample_index alloc_space -base allocs-1-start.pprof allocs-1.pprof`). The
// gateway is the released lushctl plus one file that the build adds through -overlay: no
// lushctl source knows of it.
const profileEnv = "LUSH_PERF_PROFILE"

// profileHook is the file the overlay adds to lushctl's package main: when
// LUSH_PERF_PROFILE_DIR is set, SIGUSR1 starts a CPU profile (cpu-N.pprof.tmp) and writes the
// allocations so far (allocs-N-start.pprof); SIGUSR2 stops it, writes the allocations again
// (allocs-N.pprof) and renames the CPU profile to cpu-N.pprof, which says that both are complete.
const profileHook = `package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
)

func init() {
	dir := os.Getenv("LUSH_PERF_PROFILE_DIR")
	if dir == "" {
		return
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() { // lives as long as the process: it is the harness's, not lushctl's
		n := 0
		var cpu *os.File
		allocs := func(name string) {
			if f, err := os.Create(filepath.Join(dir, name)); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}
		for s := range sig {
			switch {
			case s == syscall.SIGUSR1 && cpu == nil:
				n++
				allocs(fmt.Sprintf("allocs-%d-start.pprof", n))
				f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof.tmp", n)))
				if err != nil || pprof.StartCPUProfile(f) != nil {
					continue
				}
				cpu = f
			case s == syscall.SIGUSR2 && cpu != nil:
				pprof.StopCPUProfile()
				cpu.Close()
				allocs(fmt.Sprintf("allocs-%d.pprof", n))
				os.Rename(cpu.Name(), filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", n)))
				cpu = nil
			}
		}
	}()
}
`

// profileOverlay writes profileHook and the -overlay file that adds it to cmd/lushctl, and
// returns the overlay file's path; "" when LUSH_PERF_PROFILE is not set.
func profileOverlay(t testing.TB) string {
	t.Helper()
	if os.Getenv(profileEnv) == "" {
		return ""
	}
	dir := t.TempDir()
	hook := filepath.Join(dir, "perfprofile.go")
	if err := os.WriteFile(hook, []byte(profileHook), 0o644); err != nil {
		t.Fatal(err)
	}
	main, err := filepath.Abs("../../cmd/lushctl/zz_perfprofile.go")
	if err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {main: hook}})
	path := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(path, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// profileDir is where the gateway named name writes its profiles ("" without LUSH_PERF_PROFILE).
func profileDir(t testing.TB, name string) string {
	t.Helper()
	root := os.Getenv(profileEnv)
	if root == "" {
		return ""
	}
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// profiling profiles process p (started with profileDir dir) while measure runs: the n-th
// window of that process. Without a dir it only runs measure.
func profiling[T any](t testing.TB, p *proc, dir string, n int, measure func() T) T {
	t.Helper()
	if dir == "" || p == nil {
		return measure()
	}
	signal := func(s syscall.Signal) {
		if err := p.cmd.Process.Signal(s); err != nil {
			t.Fatalf("profile %s: %v", p.name, err)
		}
	}
	signal(syscall.SIGUSR1)
	r := measure()
	signal(syscall.SIGUSR2)
	done := filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", n))
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := os.Stat(done); err == nil {
			t.Logf("profile of %s: %s", p.name, done)
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("profile %s: %s was not written within 30 s", p.name, done)
		}
		time.Sleep(20 * time.Millisecond) // polls a file another process writes
	}
}
