// Package projecttest builds Lush projects for tests: a project directory written from a map of
// files, its offline build, and the policy engine of the build, with a decision deadline fit for a
// loaded test machine.
package projecttest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/policies/authz"
)

// DecisionTimeout is the policy deadline of the engines this package returns. It is not
// authz.DefaultTimeout: a decision of a test on a loaded 2-core machine, with the race detector
// on, can take longer than a server's 500 ms, and a test must not fail on wall-clock luck.
const DecisionTimeout = time.Minute

// Write writes files (path relative to the project -> content) into a new temporary directory and
// returns it. Files named run, or ending in .sh, are executable.
func Write(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if filepath.Base(rel) == "run" || filepath.Ext(rel) == ".sh" {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Build builds the project in dir offline and returns the build and the engine of its policy; a
// project that does not build fails the test with its diagnostics.
func Build(t testing.TB, dir string) (*compiler.Result, *authz.Engine) {
	t.Helper()
	res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
	if err != nil || !res.OK() {
		t.Fatalf("build %s: %v %v", dir, err, res.Diagnostics)
	}
	return res, Engine(t, res.Bundle)
}

// Engine loads the policy engine of a built bundle.
func Engine(t testing.TB, bundle []byte) *authz.Engine {
	t.Helper()
	eng, err := authz.FromBytes(context.Background(), bundle, authz.Timeout(DecisionTimeout))
	if err != nil {
		t.Fatal(err)
	}
	return eng
}
