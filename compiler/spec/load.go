package spec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/toolref"
)

// The project layout.
const (
	ConfigFile  = "lush.yaml"
	AgentsDir   = "agents"
	AgentFile   = "spec.yaml"
	LoopsDir    = "loops"
	ToolsDir    = "tools"
	ToolFile    = "tool.yaml"
	PoliciesDir = "policies"
)

// Project is everything read from a project directory.
type Project struct {
	Dir         string // absolute path of the project root
	Config      *ProjectConfig
	Agents      []*Agent     // sorted by directory
	Loops       []*Loop      // sorted by file
	Tools       []*LocalTool // sorted by directory
	Policies    []PolicyFile // policies/**/*.rego except tests, sorted by path
	PolicyTests []PolicyFile // policies/**/*_test.rego, sorted by path
	inputs      map[string]string
}

// PolicyFile is a Rego file of the project.
type PolicyFile struct {
	Path   string // project-relative, forward slashes
	Source []byte
}

// Input is one file the build read, with the digest of its content.
type Input struct {
	Path   string `json:"path"`
	Digest string `json:"digest"`
}

// AddInput records a file the build depends on. Text files are digested with CRLF line endings
// turned into LF, so a checkout on Windows builds the same hash.
func (p *Project) AddInput(rel string, data []byte) {
	if p.inputs == nil {
		p.inputs = map[string]string{}
	}
	p.inputs[rel] = Digest(normalizeText(rel, data))
}

// AddDigest records an input directory (a local tool's or a skill's) by its digest; see
// DigestDir.
func (p *Project) AddDigest(rel, digest string) {
	if p.inputs == nil {
		p.inputs = map[string]string{}
	}
	p.inputs[rel] = digest
}

// Inputs returns every recorded input, sorted by path.
func (p *Project) Inputs() []Input {
	out := make([]Input, 0, len(p.inputs))
	for k, v := range p.inputs {
		out = append(out, Input{Path: k, Digest: v})
	}
	slices.SortFunc(out, func(a, b Input) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Digest returns "sha256:<hex>" of data.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func normalizeText(rel string, data []byte) []byte {
	switch path.Ext(rel) {
	case ".yaml", ".yml", ".rego", ".md", ".json", ".txt", ".lock":
		return bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	}
	return data
}

// Load reads and parses every spec file of the project in dir. Problems with the files go to l;
// the returned error is only for a directory that cannot be read at all.
func Load(dir string, l *diag.List) (*Project, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("load project %s: %w", dir, err)
	}
	if st, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("load project: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("load project: %s is not a directory", dir)
	}
	p := &Project{Dir: abs}
	l.SetStep(diag.StepParse)

	if data, ok := p.read(ConfigFile, l); ok {
		p.Config = ParseProjectConfig(ConfigFile, data, l)
	} else {
		l.ErrorHint(diag.Pos{File: ConfigFile}, "no-project", "create lush.yaml with at least `project: <name>`", "no lush.yaml in %s: this is not a Lush project", dir)
	}

	for _, name := range p.subdirs(AgentsDir, l) {
		rel := path.Join(AgentsDir, name, AgentFile)
		if _, err := os.Stat(filepath.Join(abs, filepath.FromSlash(rel))); errors.Is(err, fs.ErrNotExist) {
			l.WarnHint(diag.Pos{File: path.Join(AgentsDir, name)}, "no-agent-spec", "add "+rel+" or remove the directory", "directory has no %s; it is not an agent", AgentFile)
			continue
		}
		if data, ok := p.read(rel, l); ok {
			if a := ParseAgent(rel, name, data, l); a != nil {
				p.Agents = append(p.Agents, a)
			}
		}
	}

	for _, f := range p.files(LoopsDir, l) {
		rel := path.Join(LoopsDir, f)
		name, isYAML := strings.CutSuffix(f, ".yaml")
		if !isYAML {
			hint := "loop specs are loops/<name>.yaml"
			if n, ok := strings.CutSuffix(f, ".yml"); ok {
				hint = "rename it to loops/" + n + ".yaml"
			}
			l.WarnHint(diag.Pos{File: rel}, "ignored-file", hint, "file is ignored")
			continue
		}
		if data, ok := p.read(rel, l); ok {
			if lp := ParseLoop(rel, name, data, l); lp != nil {
				p.Loops = append(p.Loops, lp)
			}
		}
	}

	for _, name := range p.subdirs(ToolsDir, l) {
		rel := path.Join(ToolsDir, name, ToolFile)
		if !toolref.ValidToolName(name) {
			l.ErrorHint(diag.Pos{File: path.Join(ToolsDir, name)}, "invalid-name", "rename the directory: lower-case letters, digits, '-' and '_', starting with a letter",
				"%q is not a valid local tool name", name)
			continue
		}
		if _, err := os.Stat(filepath.Join(abs, filepath.FromSlash(rel))); errors.Is(err, fs.ErrNotExist) {
			l.WarnHint(diag.Pos{File: path.Join(ToolsDir, name)}, "no-tool-file", "add "+rel+" describing the tool", "directory has no %s; it is not a local tool", ToolFile)
			continue
		}
		if data, ok := p.read(rel, l); ok {
			if t := ParseLocalTool(rel, path.Join(ToolsDir, name), name, data, l); t != nil {
				p.Tools = append(p.Tools, t)
			}
		}
	}

	p.loadPolicies(l)
	return p, nil
}

// read reads a project-relative file and records it as an input.
func (p *Project) read(rel string, l *diag.List) ([]byte, bool) {
	full := filepath.Join(p.Dir, filepath.FromSlash(rel))
	st, err := os.Stat(full)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			l.Errorf(diag.Pos{File: rel}, "read-error", "cannot read file: %v", err)
		}
		return nil, false
	}
	if st.Size() > MaxFileSize {
		l.Errorf(diag.Pos{File: rel}, "file-too-large", "file is %d bytes; project files are limited to %d", st.Size(), MaxFileSize)
		return nil, false
	}
	data, err := os.ReadFile(full)
	if err != nil {
		l.Errorf(diag.Pos{File: rel}, "read-error", "cannot read file: %v", err)
		return nil, false
	}
	p.AddInput(rel, data)
	return data, true
}

// subdirs lists the directories directly under a project-relative directory, sorted, skipping
// hidden ones and warning about stray files.
func (p *Project) subdirs(rel string, l *diag.List) []string {
	var out []string
	for _, e := range p.readDir(rel, l) {
		switch {
		case strings.HasPrefix(e.Name(), "."):
		case e.IsDir():
			out = append(out, e.Name())
		default:
			hint := fmt.Sprintf("put it in %s/<name>/", rel)
			if rel == AgentsDir {
				hint = fmt.Sprintf("agent specs live in %s/<name>/%s", AgentsDir, AgentFile)
			}
			l.WarnHint(diag.Pos{File: path.Join(rel, e.Name())}, "ignored-file", hint, "file is ignored")
		}
	}
	return out
}

// files lists the regular files directly under a project-relative directory, sorted, skipping
// hidden ones.
func (p *Project) files(rel string, l *diag.List) []string {
	var out []string
	for _, e := range p.readDir(rel, l) {
		if !strings.HasPrefix(e.Name(), ".") && !e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// readDir lists a project-relative directory; a missing one is empty.
func (p *Project) readDir(rel string, l *diag.List) []os.DirEntry {
	entries, err := os.ReadDir(filepath.Join(p.Dir, rel))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.Errorf(diag.Pos{File: rel}, "read-error", "cannot read directory: %v", err)
	}
	return entries
}

// loadPolicies reads policies/**/*.rego. Tests (*_test.rego) are kept apart: they are not part of
// the bundle, and so not part of the build's inputs.
func (p *Project) loadPolicies(l *diag.List) {
	root := filepath.Join(p.Dir, PoliciesDir)
	err := filepath.WalkDir(root, func(full string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && full == root {
				return fs.SkipDir
			}
			return err
		}
		if strings.HasPrefix(e.Name(), ".") && full != root {
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if e.IsDir() || filepath.Ext(full) != ".rego" {
			return nil
		}
		rel, _ := filepath.Rel(p.Dir, full)
		rel = filepath.ToSlash(rel)
		if info, err := e.Info(); err == nil && info.Size() > MaxFileSize {
			l.Errorf(diag.Pos{File: rel}, "file-too-large", "file is %d bytes; project files are limited to %d", info.Size(), MaxFileSize)
			return nil
		}
		data, err := os.ReadFile(full)
		if err != nil {
			l.Errorf(diag.Pos{File: rel}, "read-error", "cannot read file: %v", err)
			return nil
		}
		if strings.HasSuffix(rel, "_test.rego") {
			p.PolicyTests = append(p.PolicyTests, PolicyFile{Path: rel, Source: data})
			return nil
		}
		p.AddInput(rel, data)
		p.Policies = append(p.Policies, PolicyFile{Path: rel, Source: data})
		return nil
	})
	if err != nil {
		l.Errorf(diag.Pos{File: PoliciesDir}, "read-error", "cannot read policies: %v", err)
	}
}
