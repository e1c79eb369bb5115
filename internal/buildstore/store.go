// Package buildstore keeps builds in a project's .lush/build directory: <hash>.json (the
// manifest) and <hash>.tar.gz (the OPA bundle), addressed by the manifest hash, plus a history
// of when each was built so that deployments can roll back by hash.
package buildstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
)

// Dir is the store's location inside a project.
const Dir = ".lush/build"

const historyFile = "history.log"

// Store is a build directory.
type Store struct {
	dir string
	now func() time.Time
}

// Open returns the store in dir (created on first save).
func Open(dir string) *Store { return &Store{dir: dir, now: time.Now} }

// ForProject returns the store of the project in projectDir.
func ForProject(projectDir string) *Store {
	return Open(filepath.Join(projectDir, filepath.FromSlash(Dir)))
}

// Path returns the store's directory.
func (s *Store) Path() string { return s.dir }

// ManifestPath returns where the manifest of hash lives.
func (s *Store) ManifestPath(hash string) string { return filepath.Join(s.dir, hash+".json") }

// BundlePath returns where the bundle of hash lives.
func (s *Store) BundlePath(hash string) string { return filepath.Join(s.dir, hash+".tar.gz") }

// Save stores a build. Saving a hash that exists again only records it in the history (the
// content is the same by construction; a stored manifest that differs is reported as corrupt).
func (s *Store) Save(hash string, manifestJSON, bundle []byte) error {
	if !manifest.ValidHash(hash) || manifest.Hash(manifestJSON) != hash {
		return fmt.Errorf("save build: manifest does not hash to %s", manifest.Short(hash))
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("save build: %w", err)
	}
	if err := writeOnce(s.ManifestPath(hash), manifestJSON); err != nil {
		return fmt.Errorf("save build %s: %w", manifest.Short(hash), err)
	}
	// A bundle may differ between saves of one manifest only in its signature (ECDSA
	// signatures are randomized), so the newest bundle wins.
	if err := writeAtomic(s.BundlePath(hash), bundle); err != nil {
		return fmt.Errorf("save build %s: %w", manifest.Short(hash), err)
	}
	f, err := os.OpenFile(filepath.Join(s.dir, historyFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("save build: %w", err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s %s\n", s.now().UTC().Format(time.RFC3339), hash); err != nil {
		return fmt.Errorf("save build: %w", err)
	}
	return nil
}

func writeOnce(path string, data []byte) error {
	old, err := os.ReadFile(path)
	if err == nil {
		if !bytes.Equal(old, data) {
			return fmt.Errorf("%s exists with different content: it is corrupt; delete it and build again", path)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return writeAtomic(path, data)
}

// writeAtomic replaces path with data, readable by all: a build holds no secret, and whoever serves
// it is often another user than the one who built it.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Entry describes a kept build.
type Entry struct {
	Hash      string    `json:"hash"`
	Project   string    `json:"project"`
	Agents    int       `json:"agents"`
	Loops     int       `json:"loops"`
	Tools     int       `json:"tools"`
	BuiltAt   time.Time `json:"built_at"` // the last time this hash was built
	HasBundle bool      `json:"has_bundle"`
}

// List returns the kept builds, most recently built first.
func (s *Store) List() ([]Entry, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list builds: %w", err)
	}
	built := s.history()
	var out []Entry
	for _, e := range entries {
		hash, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !manifest.ValidHash(hash) {
			continue
		}
		m, _, err := s.Manifest(hash)
		if err != nil {
			return nil, err
		}
		en := Entry{Hash: hash, Project: m.Project, Agents: len(m.Agents), Loops: len(m.Loops), Tools: len(m.Tools), BuiltAt: built[hash]}
		if _, err := os.Stat(s.BundlePath(hash)); err == nil {
			en.HasBundle = true
		}
		if en.BuiltAt.IsZero() {
			if info, err := e.Info(); err == nil {
				en.BuiltAt = info.ModTime().UTC()
			}
		}
		out = append(out, en)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if c := b.BuiltAt.Compare(a.BuiltAt); c != 0 {
			return c
		}
		return strings.Compare(a.Hash, b.Hash)
	})
	return out, nil
}

// history reads when each hash was last built.
func (s *Store) history() map[string]time.Time {
	out := map[string]time.Time{}
	data, err := os.ReadFile(filepath.Join(s.dir, historyFile))
	if err != nil {
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		ts, hash, ok := strings.Cut(sc.Text(), " ")
		if t, err := time.Parse(time.RFC3339, ts); ok && err == nil && manifest.ValidHash(hash) {
			out[hash] = t
		}
	}
	return out
}

// Latest returns the most recently built hash.
func (s *Store) Latest() (string, error) {
	list, err := s.List()
	if err != nil {
		return "", err
	}
	if len(list) == 0 {
		return "", fmt.Errorf("no builds in %s: run lushctl build", s.dir)
	}
	return list[0].Hash, nil
}

// Resolve expands a hash prefix (at least 4 hex digits) to the full hash of a kept build.
func (s *Store) Resolve(prefix string) (string, error) {
	if len(prefix) < 4 {
		return "", fmt.Errorf("build %q: give at least 4 characters of the hash", prefix)
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("resolve build %s: %w", prefix, err)
	}
	var matches []string
	for _, e := range entries {
		if hash, ok := strings.CutSuffix(e.Name(), ".json"); ok && manifest.ValidHash(hash) && strings.HasPrefix(hash, prefix) {
			matches = append(matches, hash)
		}
	}
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("no build %s in %s (lushctl builds lists them)", prefix, s.dir)
	case 1:
		return matches[0], nil
	}
	slices.Sort(matches)
	return "", fmt.Errorf("build %s is ambiguous: it matches %s", prefix, strings.Join(matches, ", "))
}

// Manifest reads and verifies the manifest of hash.
func (s *Store) Manifest(hash string) (*manifest.Manifest, []byte, error) {
	data, err := os.ReadFile(s.ManifestPath(hash))
	if err != nil {
		return nil, nil, fmt.Errorf("read build %s: %w", manifest.Short(hash), err)
	}
	m, err := manifest.Decode(data, hash)
	if err != nil {
		return nil, nil, fmt.Errorf("read build %s: %w", manifest.Short(hash), err)
	}
	return m, data, nil
}

const currentFile = "current"

// Deploy makes hash the build that gateways following this store serve, atomically, and records
// it in deploys.log. The build must be in the store.
func (s *Store) Deploy(hash string) error {
	if _, _, err := s.Manifest(hash); err != nil {
		return fmt.Errorf("deploy: %w", err)
	}
	if _, err := os.Stat(s.BundlePath(hash)); err != nil {
		return fmt.Errorf("deploy %s: no bundle: %w", manifest.Short(hash), err)
	}
	if err := writeAtomic(filepath.Join(s.dir, currentFile), []byte(hash+"\n")); err != nil {
		return fmt.Errorf("deploy %s: %w", manifest.Short(hash), err)
	}
	f, err := os.OpenFile(filepath.Join(s.dir, "deploys.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("deploy: %w", err)
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "%s %s\n", s.now().UTC().Format(time.RFC3339), hash)
	return err
}

// Current returns the deployed build ("" when nothing was deployed).
func (s *Store) Current() (string, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, currentFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read deployed build: %w", err)
	}
	hash := strings.TrimSpace(string(data))
	if !manifest.ValidHash(hash) {
		return "", fmt.Errorf("%s does not hold a build hash", filepath.Join(s.dir, currentFile))
	}
	return hash, nil
}

// Load reads a build's manifest (verified against its hash) and its bundle.
func (s *Store) Load(hash string) (*manifest.Manifest, []byte, error) {
	m, _, err := s.Manifest(hash)
	if err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(s.BundlePath(hash))
	if err != nil {
		return nil, nil, fmt.Errorf("read bundle of build %s: %w", manifest.Short(hash), err)
	}
	return m, b, nil
}
