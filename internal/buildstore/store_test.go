package buildstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
)

func encoded(t *testing.T, project string) ([]byte, string) {
	t.Helper()
	data, hash, err := manifest.Encode(&manifest.Manifest{Schema: manifest.Schema, Project: project})
	if err != nil {
		t.Fatal(err)
	}
	return data, hash
}

func TestSaveListResolve(t *testing.T) {
	s := Open(t.TempDir())
	clock := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	s.now = func() time.Time { clock = clock.Add(time.Minute); return clock }

	if _, err := s.Latest(); err == nil || !strings.Contains(err.Error(), "run lushctl build") {
		t.Errorf("Latest on an empty store: %v", err)
	}
	a, ha := encoded(t, "alpha")
	b, hb := encoded(t, "beta")
	for _, save := range []struct {
		data []byte
		hash string
	}{{a, ha}, {b, hb}, {a, ha}} { // alpha is rebuilt last
		if err := s.Save(save.hash, save.data, []byte("bundle")); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.List()
	if err != nil || len(list) != 2 || list[0].Hash != ha || list[1].Hash != hb || !list[0].HasBundle {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if latest, _ := s.Latest(); latest != ha {
		t.Errorf("Latest = %s, want the most recently built %s", latest, ha)
	}
	if got, err := s.Resolve(ha[:6]); err != nil || got != ha {
		t.Errorf("Resolve prefix = %s, %v", got, err)
	}
	if _, err := s.Resolve("abc"); err == nil || !strings.Contains(err.Error(), "at least 4") {
		t.Errorf("short prefix: %v", err)
	}
	if _, err := s.Resolve("ffffffffff"); err == nil || !strings.Contains(err.Error(), "no build") {
		t.Errorf("unknown prefix: %v", err)
	}
	if m, _, err := s.Manifest(hb); err != nil || m.Project != "beta" {
		t.Errorf("Manifest = %+v, %v", m, err)
	}
}

func TestRefusesBadContent(t *testing.T) {
	s := Open(t.TempDir())
	a, ha := encoded(t, "alpha")
	if err := s.Save(ha, append(a, ' '), nil); err == nil {
		t.Error("saved content under a hash it does not have")
	}
	if err := s.Save(ha, a, nil); err != nil {
		t.Fatal(err)
	}
	// Someone edits the stored manifest: reading it fails and saving over it is refused.
	if err := os.WriteFile(s.ManifestPath(ha), []byte(strings.Replace(string(a), "alpha", "alphA", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Manifest(ha); err == nil || !strings.Contains(err.Error(), "corrupt or altered") {
		t.Errorf("altered manifest read: %v", err)
	}
	if err := s.Save(ha, a, nil); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("saved over an altered manifest: %v", err)
	}
}

// A kept build is read by whoever serves it, often another user than the one who built it (a
// container's non-root user reading a project mounted read-only): every file of the store is
// readable by all, as the history is.
func TestFilesReadableByOthers(t *testing.T) {
	s := Open(t.TempDir())
	data, hash := encoded(t, "alpha")
	if err := s.Save(hash, data, []byte("bundle")); err != nil {
		t.Fatal(err)
	}
	if err := s.Deploy(hash); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{s.ManifestPath(hash), s.BundlePath(hash), filepath.Join(s.Path(), currentFile)} {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm()&0o044 != 0o044 {
			t.Errorf("%s has mode %v: others cannot read it", filepath.Base(path), info.Mode().Perm())
		}
	}
}
