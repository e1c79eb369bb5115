package compiler_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/open-policy-agent/opa/v1/bundle"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestQuickstartIndexGolden: data.lush.index of the quickstart bundle, the lookups the
// decision's fast path reads, is the same on every build and as recorded in
// testdata/quickstart-index.json (go test ./compiler -run IndexGolden -update after an intended
// change).
func TestQuickstartIndexGolden(t *testing.T) {
	var got [][]byte
	for range 2 {
		b, err := bundle.NewReader(bytes.NewReader(build(t, quickstart).Bundle)).WithSkipBundleVerification(true).Read()
		if err != nil {
			t.Fatal(err)
		}
		index, err := json.MarshalIndent(b.Data["lush"].(map[string]any)["index"], "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, append(index, '\n'))
	}
	if !bytes.Equal(got[0], got[1]) {
		t.Fatalf("two builds wrote different indexes:\n%s\n%s", got[0], got[1])
	}
	golden := filepath.Join("testdata", "quickstart-index.json")
	if *update {
		if err := os.WriteFile(golden, got[0], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[0], want) {
		t.Errorf("index differs from %s (run with -update if the change is intended)\n--- got\n%s\n--- want\n%s", golden, got[0], want)
	}
}
