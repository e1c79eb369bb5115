package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestErrorExamples builds each broken project under examples/errors and compares the exact
// output with its expected.txt, whose first line is the command that produced it:
//
//	$ lushctl build --check --offline
//
// Run `go test ./cmd/lushctl -run ErrorExamples -update` after an intended change of wording.
func TestErrorExamples(t *testing.T) {
	dirs, err := filepath.Glob("../../examples/errors/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 7 {
		t.Fatalf("found %d error examples, want one per validation step", len(dirs))
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			golden := filepath.Join(dir, "expected.txt")
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			cmdline, _, _ := strings.Cut(string(want), "\n")
			argv := strings.Fields(strings.TrimPrefix(cmdline, "$ lushctl "))
			if len(argv) == 0 || argv[0] != "build" {
				t.Fatalf("%s must start with a line like \"$ lushctl build --check\"", golden)
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append(argv, dir), nil, &stdout, &stderr)
			got := fmt.Sprintf("%s\n%sexit status %d\n", cmdline, stderr.String(), code)
			if stdout.Len() > 0 {
				t.Errorf("a failed build printed on stdout: %q", stdout.String())
			}
			if code != exitFailed {
				t.Errorf("exit status %d, want %d", code, exitFailed)
			}
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != string(want) {
				t.Errorf("output differs from %s (run with -update if the change is intended)\n--- got\n%s\n--- want\n%s", golden, got, want)
			}
		})
	}
}
