package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
)

// lushYAMLPath is a key path of lush.yaml as the documents and the help write it: a dotted path
// under one of lush.yaml's mappings (or settings, a name people give them), or any dotted path
// right after "lush.yaml". A path inside another (data.lush.project.settings.max_depth, the
// policy's data) is not one.
var lushYAMLPath = regexp.MustCompile(`(?:^|[^\w./$\[-])((?:settings|authorization|roles)(?:\.\w+)+)|lush\.yaml(?:'s)?\x60? \x60?(\w+(?:\.\w+)+)`)

// lushYAMLPaths returns the lush.yaml key paths text mentions.
func lushYAMLPaths(text string) []string {
	var out []string
	for _, m := range lushYAMLPath.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1]+m[2])
	}
	return out
}

// lushYAMLKeyError says why path is not a key path of lush.yaml, or returns "": it parses a
// lush.yaml setting it and looks for the parser's unknown-field and unknown-role errors.
func lushYAMLKeyError(path string) string {
	var b strings.Builder
	b.WriteString("project: keys\n")
	for i, key := range strings.Split(path, ".") {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(strings.Repeat("  ", i) + key + ":")
	}
	b.WriteString(" null\n")
	var l diag.List
	spec.ParseProjectConfig("lush.yaml", []byte(b.String()), &l)
	for _, d := range l.Sorted() {
		if d.Code == "unknown-field" || d.Code == "unknown-role" {
			return d.Message + " (" + d.Suggestion + ")"
		}
	}
	return ""
}

// helpTexts returns every text of the help: each command's descriptions, examples and flags.
func helpTexts(cmd *cobra.Command) []docFile {
	texts := []docFile{{cmd.CommandPath() + " --help", cmd.Short + "\n" + cmd.Long + "\n" + cmd.Example}}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		texts = append(texts, docFile{cmd.CommandPath() + " --" + f.Name, f.Usage})
	})
	for _, c := range cmd.Commands() {
		texts = append(texts, helpTexts(c)...)
	}
	return texts
}

// regoMessages returns the base policy library's Rego without its comments: the messages of its
// denials, which users read, but not the descriptions of its data.
func regoMessages(t *testing.T) []docFile {
	t.Helper()
	paths, err := filepath.Glob("../../policies/*.rego")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no Rego in ../../policies: %v", err)
	}
	var out []docFile
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.rego") {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var code []string
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "#") {
				code = append(code, line)
			}
		}
		out = append(out, docFile{strings.TrimPrefix(p, "../../"), strings.Join(code, "\n")})
	}
	return out
}

// Every lush.yaml key path the documents, the help and the policy's messages name exists:
// authorization.max_call_depth, not settings.max_depth.
func TestLushYAMLKeysMentionedExist(t *testing.T) {
	for _, tt := range []struct {
		path string
		ok   bool
	}{
		{"authorization.max_call_depth", true}, {"authorization.approval_required_for", true}, {"roles.audit", true},
		{"settings.max_depth", false}, {"settings.approval_risks", false}, {"authorization.max_depth", false}, {"roles.auditor", false},
	} {
		if msg := lushYAMLKeyError(tt.path); (msg == "") != tt.ok {
			t.Errorf("%s: %q, want ok %v", tt.path, msg, tt.ok)
		}
	}
	if got := lushYAMLPaths("raise settings.max_depth. data.lush.project.settings.max_depth, `authorization.max_call_depth`, lush.yaml `budgets.x`"); strings.Join(got, " ") != "settings.max_depth authorization.max_call_depth budgets.x" {
		t.Errorf("paths found: %q", got)
	}

	texts := append(append(readDocs(t), helpTexts(newRootCmd())...), regoMessages(t)...)
	found := 0
	for _, d := range texts {
		for _, path := range lushYAMLPaths(d.text) {
			found++
			if msg := lushYAMLKeyError(path); msg != "" {
				t.Errorf("%s names %s, which lush.yaml does not have: %s", d.name, path, msg)
			}
		}
	}
	if found < 3 {
		t.Errorf("found only %d lush.yaml key paths: is the pattern broken?", found)
	}
}
