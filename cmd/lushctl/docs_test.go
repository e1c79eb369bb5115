package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// docFile is a user document: README.md or docs/*.md.
type docFile struct {
	name string // as the repository names it, for messages
	text string
}

func readDocs(t *testing.T) []docFile {
	t.Helper()
	paths, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var docs []docFile
	for _, p := range append([]string{"../../README.md"}, paths...) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, docFile{strings.TrimPrefix(p, "../../"), string(data)})
	}
	if len(docs) < 5 {
		t.Fatalf("found only %d documents: is the test running in cmd/lushctl?", len(docs))
	}
	return docs
}

// docLine is one logical line of a code block (continuation lines joined) and where it starts.
type docLine struct {
	where string // file:line
	text  string
}

// codeBlock is a fenced code block of a document.
type codeBlock struct {
	lang  string
	lines []docLine
}

// codeBlocks returns the fenced code blocks of a document, their lines ending in a backslash
// joined with the next.
func codeBlocks(d docFile) []codeBlock {
	var blocks []codeBlock
	var cur *codeBlock
	var pending *docLine
	for i, line := range strings.Split(d.text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if cur == nil {
				cur = &codeBlock{lang: strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "```"))}
			} else {
				blocks = append(blocks, *cur)
				cur, pending = nil, nil
			}
			continue
		}
		if cur == nil {
			continue
		}
		if pending != nil {
			pending.text += " " + strings.TrimSpace(line)
		} else {
			cur.lines = append(cur.lines, docLine{fmt.Sprintf("%s:%d", d.name, i+1), line})
			pending = &cur.lines[len(cur.lines)-1]
		}
		if body, more := strings.CutSuffix(pending.text, `\`); more {
			pending.text = body
		} else {
			pending = nil
		}
	}
	return blocks
}

// docCommand is a lushctl command line a document shows, as its words after "lushctl".
type docCommand struct {
	where    string
	args     []string
	synopsis bool // a usage synopsis ("lushctl build [dir] [flags]"), not a command to run
}

// inlineCommand is a command in running text: `lushctl …` in backquotes.
var inlineCommand = regexp.MustCompile("`lushctl ([^`]+)`")

// docCommands returns every lushctl command of the documents: those in running text and those of
// the code blocks.
func docCommands(docs []docFile) []docCommand {
	var out []docCommand
	for _, d := range docs {
		out = append(out, inlineCommands(d)...)
		for _, b := range codeBlocks(d) {
			out = append(out, blockCommands(b)...)
		}
	}
	return out
}

// inlineCommands returns the commands in backquotes of a document's running text, as synopses
// (except on a line quoting lushctl's error message: the document shows that command on purpose).
func inlineCommands(d docFile) []docCommand {
	var out []docCommand
	for i, line := range strings.Split(d.text, "\n") {
		if strings.Contains(line, "`lushctl: ") {
			continue
		}
		for _, m := range inlineCommand.FindAllStringSubmatch(line, -1) {
			words := strings.Fields(strings.ReplaceAll(m[1], `\|`, "|")) // \| in a table cell
			out = append(out, docCommand{where: fmt.Sprintf("%s:%d", d.name, i+1), args: words, synopsis: true})
		}
	}
	return out
}

// blockCommands returns the lushctl commands of a code block: every command of an sh block, the
// prompts ("$ ") of a console block except those whose output is a usage error (shown on
// purpose), and the synopses of an unlabelled block, with their indented continuation lines.
func blockCommands(b codeBlock) []docCommand {
	var out []docCommand
	switch b.lang {
	case "sh", "bash", "shell":
		for _, l := range b.lines {
			out = append(out, lushctlCalls(l.where, l.text)...)
		}
	case "console":
		for i, l := range b.lines {
			if cmd, ok := strings.CutPrefix(l.text, "$ "); ok && !showsUsageError(b.lines[i+1:]) {
				out = append(out, lushctlCalls(l.where, cmd)...)
			}
		}
	case "":
		synopsis := -1 // the synopsis an indented line continues
		for _, l := range b.lines {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(l.text), "lushctl "); ok {
				out = append(out, docCommand{where: l.where, args: strings.Fields(rest), synopsis: true})
				synopsis = len(out) - 1
			} else if synopsis >= 0 && strings.HasPrefix(l.text, " ") {
				out[synopsis].args = append(out[synopsis].args, strings.Fields(l.text)...)
			} else {
				synopsis = -1
			}
		}
	}
	return out
}

// showsUsageError reports whether a console prompt's output (the lines up to the next prompt)
// is lushctl's usage error.
func showsUsageError(after []docLine) bool {
	for _, l := range after {
		if strings.HasPrefix(l.text, "$ ") {
			return false
		}
		if strings.Contains(l.text, "Run 'lushctl --help' for usage.") {
			return true
		}
	}
	return false
}

// assignment is a shell variable assignment before a command (GOOGLE_API_KEY=… lushctl chat).
var assignment = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)

// lushctlCalls returns the lushctl commands of a shell line: in pipelines, lists, and command
// substitutions, after variable assignments.
func lushctlCalls(where, line string) []docCommand {
	var out []docCommand
	for _, words := range shellCommands(line) {
		for i, w := range words {
			if filepath.Base(w) == "lushctl" {
				out = append(out, docCommand{where: where, args: elide(words[i+1:])})
				break
			}
			if !assignment.MatchString(w) && w != "sudo" && w != "time" {
				break
			}
		}
	}
	return out
}

// elide drops what a "…" leaves out of a command: "--api-key …" is a flag with a value not
// shown, "--build $hash …" a command with more flags not shown.
func elide(args []string) []string {
	for i, a := range args {
		if a == "…" && (i == 0 || !strings.HasPrefix(args[i-1], "-") || strings.Contains(args[i-1], "=")) {
			return args[:i]
		}
	}
	return args
}

// shellCommands splits a line of shell into its simple commands' words: quotes are honoured,
// "#" starts a comment, |, ||, &&, ; and & separate commands, redirections (2>/dev/null) are
// dropped, and a command substitution $(…) is a word of its command and a command of its own.
func shellCommands(line string) [][]string {
	var cmds [][]string
	var words []string
	var word strings.Builder
	inWord, redirect := false, false
	flushWord := func() {
		if inWord {
			if !redirect {
				words = append(words, word.String())
			}
			word.Reset()
			inWord, redirect = false, false
		}
	}
	flushCmd := func() {
		flushWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			end := strings.IndexByte(line[i+1:], c)
			if end < 0 {
				end = len(line) - i - 1
			}
			word.WriteString(line[i+1 : i+1+end])
			inWord = true
			i += end + 1
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			depth, j := 1, i+2
			for ; j < len(line) && depth > 0; j++ {
				switch line[j] {
				case '(':
					depth++
				case ')':
					depth--
				}
			}
			inner := line[i+2 : max(i+2, j-1)]
			cmds = append(cmds, shellCommands(inner)...)
			word.WriteString("$(" + inner + ")")
			inWord = true
			i = j - 1
		case c == '#' && !inWord:
			flushCmd()
			return cmds
		case c == '>' || c == '<':
			if strings.Trim(word.String(), "0123456789") == "" { // 2>/dev/null: the 2 is the redirection's
				word.Reset()
				inWord = false
			} else {
				flushWord()
			}
			for i+1 < len(line) && (line[i+1] == '>' || line[i+1] == '&') {
				i++
			}
			redirect = true
		case c == '|' || c == '&' || c == ';':
			flushCmd()
		case c == ' ' || c == '\t':
			flushWord()
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	flushCmd()
	return cmds
}

// check parses a documented command with lushctl's command tree, without running it: the
// subcommands must exist, and every flag must be one of the command's (for a command to run:
// with a value of its type, and the positional arguments the command accepts).
func (dc docCommand) check() error {
	root := newRootCmd()
	root.InitDefaultCompletionCmd()
	if dc.synopsis {
		return checkSynopsis(root, dc.args)
	}
	cmd, rest, err := root.Find(dc.args)
	if err != nil {
		return err
	}
	cmd.InitDefaultHelpFlag()
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	positional := cmd.Flags().Args()
	if cmd.HasSubCommands() && !cmd.Runnable() && len(positional) > 0 {
		return fmt.Errorf("%s has no subcommand %q", cmd.CommandPath(), positional[0])
	}
	if err := cmd.ValidateArgs(positional); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return nil
}

// synopsisFlag is a flag in a synopsis: --name or -n, wherever it stands ("[--build HASH]",
// "(--out FILE | --opa-url URL)", "--live-writes[=REF]").
var synopsisFlag = regexp.MustCompile(`(?:^|[\s\[(|])(--?[a-zA-Z][a-zA-Z0-9-]*)`)

// checkSynopsis checks a synopsis ("audit query [--log PATH]", "approvals list|show <id>"): its
// subcommands exist (each of a|b), and each flag it names is a flag of the command.
func checkSynopsis(root *cobra.Command, words []string) error {
	cmd := root
	for len(words) > 0 && cmd.HasSubCommands() {
		alternatives := strings.Split(words[0], "|")
		if strings.ContainsAny(words[0][:1], "[<(-") {
			break
		}
		next := subcommand(cmd, alternatives[0])
		if next == nil {
			if cmd.Runnable() && len(alternatives) == 1 {
				break // a positional argument
			}
			return fmt.Errorf("%s has no subcommand %q", cmd.CommandPath(), alternatives[0])
		}
		for _, alt := range alternatives[1:] {
			if subcommand(cmd, alt) == nil {
				return fmt.Errorf("%s has no subcommand %q", cmd.CommandPath(), alt)
			}
		}
		cmd, words = next, words[1:]
	}
	cmd.InitDefaultHelpFlag()
	for _, m := range synopsisFlag.FindAllStringSubmatch(strings.Join(words, " "), -1) {
		name := m[1]
		var found bool
		if long, ok := strings.CutPrefix(name, "--"); ok {
			found = cmd.Flags().Lookup(long) != nil || cmd.InheritedFlags().Lookup(long) != nil
		} else {
			short := strings.TrimPrefix(name, "-")
			found = len(short) == 1 && (cmd.Flags().ShorthandLookup(short) != nil || cmd.InheritedFlags().ShorthandLookup(short) != nil)
		}
		if !found {
			return fmt.Errorf("%s has no flag %s", cmd.CommandPath(), name)
		}
	}
	return nil
}

// subcommand returns cmd's subcommand called (or aliased) name, or nil.
func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}

// helpCommands returns the commands the help shows: every command's usage line (as a synopsis)
// and examples.
func helpCommands(cmd *cobra.Command) []docCommand {
	example := docFile{cmd.CommandPath() + " --help (example)", "```sh\n" + cmd.Example + "\n```\n"}
	out := docCommands([]docFile{example})
	if cmd.HasParent() {
		path := strings.Fields(cmd.Parent().CommandPath())[1:]
		out = append(out, docCommand{where: cmd.CommandPath() + " --help (usage)", args: append(path, strings.Fields(cmd.Use)...), synopsis: true})
	}
	for _, c := range cmd.Commands() {
		out = append(out, helpCommands(c)...)
	}
	return out
}

// Every lushctl command README.md, docs/*.md and the help's usage lines and examples show parses with lushctl's
// own command tree: its subcommands exist and its flags are the command's, so the documents
// cannot drift from the CLI. (They are not run: most need a server.)
func TestDocumentedCommandsParse(t *testing.T) {
	cmds := docCommands(readDocs(t))
	if len(cmds) < 200 {
		t.Fatalf("found only %d lushctl commands in the documents: is the extraction broken?", len(cmds))
	}
	help := helpCommands(newRootCmd())
	if len(help) < 100 {
		t.Fatalf("found only %d lushctl commands in the help: is the extraction broken?", len(help))
	}
	cmds = append(cmds, help...)
	for _, dc := range cmds {
		if err := dc.check(); err != nil {
			t.Errorf("%s: lushctl %s\n\t%v", dc.where, strings.Join(dc.args, " "), err)
		}
	}
}

// The extraction finds commands where the documents write them, and the check refuses what
// lushctl refuses.
func TestDocumentedCommandsExtraction(t *testing.T) {
	doc := docFile{"x.md", "```sh\n" +
		"lushctl build && lushctl deploy $(lushctl build -q)   # build, then deploy\n" +
		"echo 'Q3? # not a comment' | GOOGLE_API_KEY=… lushctl chat researcher examples/quickstart \\\n  --provider scripted\n" +
		"```\n```console\n$ lushctl build --bogus\nlushctl: unknown flag: --bogus\nRun 'lushctl --help' for usage.\n$ lushctl builds qs 2>/dev/null\n```\n" +
		"```\nlushctl audit query [--log PATH]\n                    [--decision D]\n```\n```yaml\nx: lushctl build\n```\n"}
	var got []string
	for _, c := range docCommands([]docFile{doc}) {
		got = append(got, fmt.Sprintf("%s %q %v", c.where, c.args, c.check() != nil))
	}
	want := []string{
		`x.md:2 ["build"] false`,
		`x.md:2 ["build" "-q"] false`,
		`x.md:2 ["deploy" "$(lushctl build -q)"] false`,
		`x.md:3 ["chat" "researcher" "examples/quickstart" "--provider" "scripted"] false`,
		`x.md:10 ["builds" "qs"] false`,
		`x.md:13 ["audit" "query" "[--log" "PATH]" "[--decision" "D]"] true`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, tt := range []struct {
		synopsis bool
		args     string
		ok       bool
	}{
		{false, "audit query --outcome deny -o json", true},
		{false, "nosuchcmd", false},
		{false, "audit nosuch", false},
		{false, "audit query --decision deny", false},
		{false, "build a b", false},
		{false, "audit tail -n many", false},
		{true, "budget top-up <budget> [--amount N]", true},
		{true, "approvals list|show <id>", true},
		{true, "completion bash|zsh", true},
		{true, "approvals list|shw", false},
		{true, "budget top-upp", false},
		{true, "mesh xds [--prnt]", false},
	} {
		err := (docCommand{args: strings.Fields(tt.args), synopsis: tt.synopsis}).check()
		if (err == nil) != tt.ok {
			t.Errorf("lushctl %s (synopsis %v): error %v, want ok %v", tt.args, tt.synopsis, err, tt.ok)
		}
	}
}
