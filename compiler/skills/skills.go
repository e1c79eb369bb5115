// Package skills resolves the versioned skill references of agent specs
// (<registry>/<namespace>/<name>@<version>) from a local skills directory, reads each skill's
// SKILL.md (Anthropic's skill format: YAML front matter with name and description, then the
// instructions), digests each skill folder, and reads, verifies and writes skills.lock.
//
// Layout: <skills dir>/<registry>/<namespace>/<name>/<version>/SKILL.md, with optional local tools
// in <version>/tools/<tool>/tool.yaml.
package skills

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
)

// SkillFile is the file that makes a folder a skill.
const SkillFile = "SKILL.md"

var (
	registryRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
	segmentRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	versionRe  = regexp.MustCompile(`^[0-9]+(\.[0-9]+){0,2}(-[0-9A-Za-z.-]+)?$`)
)

// Ref is a parsed skill reference.
type Ref struct {
	Registry, Namespace, Name, Version string
}

// String renders the reference as registry/namespace/name@version.
func (r Ref) String() string {
	return fmt.Sprintf("%s/%s/%s@%s", r.Registry, r.Namespace, r.Name, r.Version)
}

// Unversioned renders registry/namespace/name.
func (r Ref) Unversioned() string { return r.Registry + "/" + r.Namespace + "/" + r.Name }

// dir is the reference's folder relative to the skills directory.
func (r Ref) dir() string { return path.Join(r.Registry, r.Namespace, r.Name, r.Version) }

// ParseRef parses registry/namespace/name@version, e.g. skills.sh/acme/code-review@1.0.
func ParseRef(s string) (Ref, error) {
	body, version, ok := strings.Cut(s, "@")
	if !ok {
		return Ref{}, fmt.Errorf("skill %q has no version: pin one, e.g. %s@1.0", s, s)
	}
	parts := strings.Split(body, "/")
	if len(parts) != 3 {
		return Ref{}, fmt.Errorf("skill %q must be <registry>/<namespace>/<name>@<version>, e.g. skills.sh/acme/code-review@1.0", s)
	}
	r := Ref{Registry: parts[0], Namespace: parts[1], Name: parts[2], Version: version}
	switch {
	case !registryRe.MatchString(r.Registry):
		return Ref{}, fmt.Errorf("skill %q: registry %q is not a lower-case host name", s, r.Registry)
	case !segmentRe.MatchString(r.Namespace) || !segmentRe.MatchString(r.Name):
		return Ref{}, fmt.Errorf("skill %q: namespace and name must be lower-case letters, digits, '.', '-' and '_'", s)
	case !versionRe.MatchString(r.Version):
		return Ref{}, fmt.Errorf("skill %q: version %q is not a version such as 1.0 or 1.2.3", s, r.Version)
	}
	return r, nil
}

// Skill is a resolved skill.
type Skill struct {
	Ref         Ref
	Dir         string // project-relative folder (or absolute when the skills dir is outside the project)
	Name        string
	Description string
	Fragment    string   // the instructions (SKILL.md body) composed into the system prompt
	Tools       []string // names of the local tools under tools/<name>/tool.yaml
	Digest      string   // sha256 over the folder's files
}

// Resolver finds skills in a skills directory.
type Resolver struct {
	projectDir string
	dir        string // absolute skills directory
	relDir     string // as written (project-relative or absolute)
	cache      map[Ref]*Skill
}

// NewResolver returns a resolver for skillsDir, which is relative to projectDir unless absolute.
func NewResolver(projectDir, skillsDir string) *Resolver {
	abs := skillsDir
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(projectDir, filepath.FromSlash(skillsDir))
	}
	return &Resolver{projectDir: projectDir, dir: abs, relDir: filepath.ToSlash(skillsDir), cache: map[Ref]*Skill{}}
}

// Resolve finds and reads the skill named by ref, reporting problems at pos. It returns nil if
// the skill cannot be used.
func (r *Resolver) Resolve(ref Ref, pos diag.Pos, l *diag.List) *Skill {
	if s, ok := r.cache[ref]; ok {
		return s
	}
	s := r.resolve(ref, pos, l)
	r.cache[ref] = s
	return s
}

func (r *Resolver) resolve(ref Ref, pos diag.Pos, l *diag.List) *Skill {
	dir := filepath.Join(r.dir, filepath.FromSlash(ref.dir()))
	rel := path.Join(r.relDir, ref.dir())
	data, err := os.ReadFile(filepath.Join(dir, SkillFile))
	if errors.Is(err, fs.ErrNotExist) {
		l.ErrorHint(pos, "unknown-skill", r.suggest(ref), "skill %s not found: no %s/%s", ref, rel, SkillFile)
		return nil
	}
	if err != nil {
		l.Errorf(pos, "skill-unreadable", "skill %s: %v", ref, err)
		return nil
	}
	s := &Skill{Ref: ref, Dir: rel}
	file := path.Join(rel, SkillFile)
	if !parseSkillFile(file, data, ref, s, l) {
		return nil
	}
	digest, err := spec.DigestDir(dir)
	if err != nil {
		l.Errorf(diag.Pos{File: rel}, "skill-unreadable", "skill %s: %v", ref, err)
		return nil
	}
	s.Digest, s.Tools = digest, skillTools(dir)
	return s
}

// suggest lists what the skills directory does offer for a missing reference.
func (r *Resolver) suggest(ref Ref) string {
	versions, _ := os.ReadDir(filepath.Join(r.dir, ref.Registry, ref.Namespace, ref.Name))
	var vs []string
	for _, v := range versions {
		if v.IsDir() {
			vs = append(vs, v.Name())
		}
	}
	if len(vs) > 0 {
		return fmt.Sprintf("available versions of %s: %s", ref.Unversioned(), strings.Join(vs, ", "))
	}
	known := r.Available()
	if c := diag.DidYouMean(ref.Unversioned(), known); c != "" {
		return c
	}
	return fmt.Sprintf("put the skill in %s/%s/%s", r.relDir, ref.dir(), SkillFile)
}

// Available lists registry/namespace/name of every skill folder in the skills directory.
func (r *Resolver) Available() []string {
	var out []string
	matches, _ := filepath.Glob(filepath.Join(r.dir, "*", "*", "*", "*", SkillFile))
	for _, m := range matches {
		rel, err := filepath.Rel(r.dir, m)
		if err != nil {
			continue
		}
		parts := strings.Split(filepath.ToSlash(rel), "/")
		out = append(out, strings.Join(parts[:3], "/"))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

var frontMatterFields = []string{"name", "description", "version", "license", "allowed-tools", "metadata"}

// parseSkillFile reads SKILL.md: front matter between --- lines, then the instructions.
func parseSkillFile(file string, data []byte, ref Ref, s *Skill, l *diag.List) bool {
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	rest, ok := strings.CutPrefix(text, "---\n")
	front, body, closed := strings.Cut(rest, "\n---\n")
	if !ok || !closed {
		l.ErrorHint(diag.Pos{File: file, Line: 1}, "skill-front-matter", "start SKILL.md with ---, then name: and description:, then ---",
			"SKILL.md has no YAML front matter")
		return false
	}
	var meta yaml.Node
	if err := yaml.Unmarshal([]byte(front), &meta); err != nil || len(meta.Content) == 0 || meta.Content[0].Kind != yaml.MappingNode {
		l.Errorf(diag.Pos{File: file, Line: 2}, "skill-front-matter", "SKILL.md front matter is not a YAML mapping")
		return false
	}
	m := meta.Content[0]
	valid := true
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		pos := diag.Pos{File: file, Line: k.Line + 1, Col: k.Column}
		switch k.Value {
		case "name":
			s.Name = v.Value
			if v.Value != ref.Name {
				l.ErrorHint(pos, "skill-name-mismatch", "make name: match the skill's folder", "skill name %q does not match %s", v.Value, ref)
				valid = false
			}
		case "description":
			s.Description = strings.TrimSpace(v.Value)
		case "version":
			if v.Value != ref.Version {
				l.ErrorHint(pos, "skill-version-mismatch", "make version: match the folder "+ref.Version, "skill declares version %q but sits in folder %s", v.Value, ref.Version)
				valid = false
			}
		default:
			if !slices.Contains(frontMatterFields, k.Value) {
				l.WarnHint(pos, "skill-unknown-field", diag.DidYouMean(k.Value, frontMatterFields), "SKILL.md front matter has unknown field %q", k.Value)
			}
		}
	}
	if s.Name == "" || s.Description == "" {
		l.ErrorHint(diag.Pos{File: file, Line: 1}, "skill-front-matter", "add name: and description: to the front matter", "SKILL.md front matter needs name and description")
		return false
	}
	s.Fragment = strings.TrimSpace(body)
	return valid
}

// skillTools lists the names of the local tools a skill folder holds (tools/<name>/tool.yaml).
func skillTools(dir string) []string {
	matches, _ := filepath.Glob(filepath.Join(dir, "tools", "*", "tool.yaml"))
	var out []string
	for _, m := range matches {
		out = append(out, filepath.Base(filepath.Dir(m)))
	}
	slices.Sort(out)
	return out
}
