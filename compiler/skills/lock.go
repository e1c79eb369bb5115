package skills

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lush-agents/lush/internal/diag"
)

// LockFile is the lock's name at the project root.
const LockFile = "skills.lock"

const lockHeader = `# skills.lock pins every skill this project uses by the digest of its folder.
# Written by "lushctl skills lock"; verified by "lushctl build". Do not edit by hand.
`

var digestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Lock is the content of skills.lock.
type Lock struct {
	Present bool                // false when the project has no skills.lock
	Digests map[string]string   // skill reference -> digest
	Pos     map[string]diag.Pos // where each entry is written
}

type lockFile struct {
	Version int               `yaml:"version"`
	Skills  map[string]string `yaml:"skills"`
}

// ReadLock reads skills.lock from projectDir, reporting malformed content into l. Data is the
// raw file (nil when absent), for the build's input digest.
func ReadLock(projectDir string, l *diag.List) (lock *Lock, data []byte) {
	lock = &Lock{Digests: map[string]string{}, Pos: map[string]diag.Pos{}}
	data, err := os.ReadFile(filepath.Join(projectDir, LockFile))
	if errors.Is(err, fs.ErrNotExist) {
		return lock, nil
	}
	if err != nil {
		l.Errorf(diag.Pos{File: LockFile}, "lock-unreadable", "cannot read %s: %v", LockFile, err)
		return lock, nil
	}
	lock.Present = true
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		l.ErrorHint(diag.Pos{File: LockFile}, "lock-invalid", "delete it and run lushctl skills lock", "%s is not valid YAML: %v", LockFile, err)
		return lock, data
	}
	var lf lockFile
	if err := doc.Decode(&lf); err != nil || lf.Version != 1 {
		l.ErrorHint(diag.Pos{File: LockFile}, "lock-invalid", "delete it and run lushctl skills lock", "%s is not a version 1 lock file", LockFile)
		return lock, data
	}
	// Find each entry's line for diagnostics.
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "skills" || root.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		m := root.Content[i+1]
		for j := 0; j+1 < len(m.Content); j += 2 {
			k, v := m.Content[j], m.Content[j+1]
			pos := diag.Pos{File: LockFile, Line: k.Line, Col: k.Column}
			if !digestRe.MatchString(v.Value) {
				l.ErrorHint(pos, "lock-invalid", "run lushctl skills lock", "lock entry %s has no valid sha256 digest", k.Value)
				continue
			}
			lock.Digests[k.Value] = v.Value
			lock.Pos[k.Value] = pos
		}
	}
	return lock, data
}

// Verify checks the skills in use against the lock: each must be pinned, with the digest its
// folder has now. usedAt says where each referenced skill is first referenced, including skills
// that failed to resolve; pinned skills that no agent references are warnings.
func (lock *Lock) Verify(used []*Skill, usedAt map[Ref]diag.Pos, l *diag.List) {
	inUse := map[string]bool{}
	for ref := range usedAt {
		inUse[ref.String()] = true
	}
	for _, s := range used {
		key := s.Ref.String()
		want, ok := lock.Digests[key]
		switch {
		case !lock.Present:
			l.ErrorHint(usedAt[s.Ref], "lock-missing", "run lushctl skills lock to pin the skills in use", "skill %s is used but the project has no %s", key, LockFile)
		case !ok:
			l.ErrorHint(usedAt[s.Ref], "lock-missing-entry", "run lushctl skills lock to pin it", "skill %s is not pinned in %s", key, LockFile)
		case want != s.Digest:
			l.ErrorHint(lock.Pos[key], "lock-mismatch", "review the skill's change, then run lushctl skills lock",
				"skill %s changed since it was locked: %s pins %s, the folder %s now has %s", key, LockFile, short(want), s.Dir, short(s.Digest))
		}
	}
	var stale []string
	for key := range lock.Digests {
		if !inUse[key] {
			stale = append(stale, key)
		}
	}
	slices.Sort(stale)
	for _, key := range stale {
		l.WarnHint(lock.Pos[key], "unused-skill", "run lushctl skills lock to drop it", "%s pins skill %s, which no agent uses", LockFile, key)
	}
}

// WriteLock writes skills.lock pinning exactly the given skills.
func WriteLock(projectDir string, used []*Skill) error {
	var b strings.Builder
	b.WriteString(lockHeader)
	b.WriteString("version: 1\nskills:")
	keys := make([]string, 0, len(used))
	digests := map[string]string{}
	for _, s := range used {
		keys = append(keys, s.Ref.String())
		digests[s.Ref.String()] = s.Digest
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if len(keys) == 0 {
		b.WriteString(" {}")
	}
	b.WriteString("\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %s\n", k, digests[k])
	}
	if err := os.WriteFile(filepath.Join(projectDir, LockFile), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", LockFile, err)
	}
	return nil
}

func short(digest string) string {
	if len(digest) > len("sha256:")+12 {
		return digest[:len("sha256:")+12] + "…"
	}
	return digest
}
