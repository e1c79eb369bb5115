package files

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// project makes a project with data/ (allowed), secret/ (not), and symlinks inside data/ that
// lead outside it.
func project(t testing.TB) *Sandbox {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "proj")
	for _, d := range []string{"data/sub", "secret", "drafts"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "data/q3.md"), []byte("# Q3\nrevenue +4%\n"), 0o644)
	os.WriteFile(filepath.Join(root, "data/sub/notes.txt"), []byte("notes"), 0o644)
	os.WriteFile(filepath.Join(root, "data/blob.bin"), []byte{0xff, 0xfe, 0x00, 0x01}, 0o644)
	os.WriteFile(filepath.Join(root, "secret/key.txt"), []byte("s3cr3t"), 0o644)
	os.WriteFile(filepath.Join(base, "outside.txt"), []byte("outside"), 0o644)
	os.Symlink(filepath.Join(root, "secret"), filepath.Join(root, "data/to-secret"))
	os.Symlink(filepath.Join(root, "secret/key.txt"), filepath.Join(root, "data/key-link"))
	os.Symlink(filepath.Join(base, "outside.txt"), filepath.Join(root, "drafts/out-link"))
	os.Symlink(filepath.Join(root, "data/q3.md"), filepath.Join(root, "data/q3-link"))
	os.Symlink(base, filepath.Join(root, "drafts/up"))
	os.Symlink(filepath.Join(base, "nowhere"), filepath.Join(root, "data/dangling-out"))
	return &Sandbox{Root: root, Allowed: []string{"data", "drafts/new"}}
}

func code(r Result) string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Code
}

func TestRead(t *testing.T) {
	s := project(t)
	for _, tc := range []struct {
		path, code, content string
	}{
		{"data/q3.md", "", "# Q3\nrevenue +4%\n"},
		{"./data//sub/../sub/notes.txt", "invalid_path", ""}, // any .. is refused
		{"data/sub/notes.txt", "", "notes"},
		{"data/q3-link", "", "# Q3\nrevenue +4%\n"}, // a symlink that stays inside
		{filepath.Join(s.Root, "data/q3.md"), "", "# Q3\nrevenue +4%\n"},
		{"secret/key.txt", "outside", ""},
		{"data/../secret/key.txt", "invalid_path", ""},
		{"data/key-link", "outside", ""},          // symlink escape
		{"data/to-secret/key.txt", "outside", ""}, // through a linked directory
		{filepath.Join(s.Root, "secret/key.txt"), "outside", ""},
		{"/etc/passwd", "outside", ""},
		{"data/missing.md", "not_found", ""},
		{"data/sub", "not_a_file", ""},
		{"data/blob.bin", "binary", ""},
		{"", "invalid_path", ""},
		{"data/\x00x", "invalid_path", ""},
		// Outside is outside, whether or not the path exists there: nothing is looked up.
		{"/etc/shadow", "outside", ""},
		{"/etc/nonexistent-lush-test", "outside", ""},
		{filepath.Join(filepath.Dir(s.Root), "outside.txt"), "outside", ""},
		{filepath.Join(filepath.Dir(s.Root), "missing.txt"), "outside", ""},
		{filepath.Join(filepath.Dir(s.Root), "outside.txt", "x"), "outside", ""}, // a lookup would say "not a directory"
		{"secret/missing.txt", "outside", ""},
		{"data/to-secret/missing.txt", "outside", ""}, // missing where a link inside leads
		{"data/dangling-out", "outside", ""},          // a link to nothing: not known to be inside
		{"drafts/new/missing.md", "not_found", ""},    // in an allowed directory that does not exist yet
	} {
		r := s.Read(tc.path)
		if code(r) != tc.code || tc.code == "" && (r.Content == nil || *r.Content != tc.content || !r.OK) {
			t.Errorf("Read(%q) = %+v %+v", tc.path, r, r.Error)
		}
		if r.Error != nil && strings.Contains(r.Error.Message, "s3cr3t") {
			t.Errorf("Read(%q) leaked the file", tc.path)
		}
	}
	s.MaxRead = 7
	if r := s.Read("data/q3.md"); !r.Truncated || *r.Content != "# Q3\nre" || r.Size != 17 {
		t.Errorf("truncated: %+v", r)
	}
}

func TestWrite(t *testing.T) {
	s := project(t)
	for _, tc := range []struct {
		path, code string
	}{
		{"drafts/new/digest.md", ""},
		{"drafts/new/deeper/dir/x.md", ""}, // missing directories are made, inside
		{"data/sub/notes.txt", ""},         // replaces
		{"drafts/old.md", "outside"},       // drafts/ is not allowed, drafts/new is
		{"secret/key.txt", "outside"},
		{"drafts/new/../../secret/x", "invalid_path"},
		{"data/to-secret/planted.txt", "outside"}, // through a linked directory
		{"data/key-link", "outside"},              // not through a symlink, even one inside
		{"drafts/out-link", "outside"},
		{"drafts/up/escaped.txt", "outside"},
		{"/tmp/lush-files-test.txt", "outside"},
	} {
		r := s.Write(tc.path, "written", false)
		if code(r) != tc.code || tc.code == "" && (!r.OK || r.Size != 7) {
			t.Errorf("Write(%q) = %+v %+v", tc.path, r, r.Error)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(s.Root, "secret/key.txt")); string(data) != "s3cr3t" {
		t.Error("the secret was overwritten")
	}
	if _, err := os.Stat(filepath.Join(s.Root, "secret/planted.txt")); err == nil {
		t.Error("a file was planted outside")
	}
	if r := s.Write("drafts/new/digest.md", " more", true); !r.OK || r.Size != 12 {
		t.Errorf("append: %+v", r)
	}
	s.MaxWrite = 3
	if r := s.Write("drafts/new/big.md", "four", false); code(r) != "too_large" {
		t.Errorf("too large: %+v", r)
	}
}

func TestList(t *testing.T) {
	s := project(t)
	r := s.List("data")
	if !r.OK || r.Path != "data" {
		t.Fatalf("%+v %+v", r, r.Error)
	}
	var got []string
	for _, e := range r.Entries {
		got = append(got, e.Name+":"+e.Type)
	}
	if want := "blob.bin:file,dangling-out:symlink,key-link:symlink,q3-link:symlink,q3.md:file,sub:dir,to-secret:symlink"; strings.Join(got, ",") != want {
		t.Errorf("entries %s", strings.Join(got, ","))
	}
	for path, want := range map[string]string{"": "outside", ".": "outside", "secret": "outside", "data/to-secret": "outside", "data/q3.md": "not_a_directory", "data/nope": "not_found",
		"secret/nope": "outside", "/etc/nonexistent-lush-test": "outside", "drafts/new": "not_found", "drafts/new/sub": "not_found", "drafts/nope": "outside"} {
		if r := s.List(path); code(r) != want {
			t.Errorf("List(%q) = %+v %+v", path, r, r.Error)
		}
	}
	s.MaxEntries = 2
	if r := s.List("data"); !r.Truncated || len(r.Entries) != 2 {
		t.Errorf("bounded: %+v", r)
	}
}

// FuzzPaths: whatever path a model sends, nothing outside the allowed paths is read or written.
func FuzzPaths(f *testing.F) {
	for _, p := range []string{"data/q3.md", "data/key-link", "data/to-secret/key.txt", "../secret/key.txt", "/etc/passwd",
		"data/./../secret/key.txt", "data//to-secret//key.txt", "drafts/up/outside.txt", "drafts/new/x", "data\\..\\secret"} {
		f.Add(p)
	}
	s := project(f)
	f.Fuzz(func(t *testing.T, path string) {
		if r := s.Read(path); r.OK && (strings.Contains(*r.Content, "s3cr3t") || strings.Contains(*r.Content, "outside")) {
			t.Fatalf("Read(%q) escaped", path)
		}
		if r := s.List(path); r.OK && !strings.HasPrefix(r.Path, "data") && !strings.HasPrefix(r.Path, "drafts/new") {
			t.Fatalf("List(%q) escaped to %s", path, r.Path)
		}
		if r := s.Write(path, "fuzz", false); r.OK && !strings.HasPrefix(r.Path, "data") && !strings.HasPrefix(r.Path, "drafts/new") {
			t.Fatalf("Write(%q) escaped to %s", path, r.Path)
		}
	})
}

// TestReservedDirectories: .lush (decision log, keys, credentials) and .git stay out of reach,
// even when the whole project is allowed.
func TestReservedDirectories(t *testing.T) {
	s := project(t)
	s.Allowed = []string{"."}
	os.MkdirAll(filepath.Join(s.Root, ".lush"), 0o700)
	os.WriteFile(filepath.Join(s.Root, ".lush/credentials.local"), []byte("tok3n"), 0o600)
	os.MkdirAll(filepath.Join(s.Root, ".git"), 0o755)
	os.Symlink(filepath.Join(s.Root, ".lush"), filepath.Join(s.Root, "data/lush-link"))
	for _, p := range []string{".lush/credentials.local", ".LUSH/credentials.local", "data/lush-link/credentials.local", filepath.Join(s.Root, ".lush/credentials.local"),
		".lush/missing", "data/lush-link/missing", ".git/missing"} {
		if r := s.Read(p); code(r) != "outside" {
			t.Errorf("Read(%q) = %+v %+v", p, r, r.Error)
		}
	}
	if r := s.Write(".git/config", "x", false); code(r) != "outside" {
		t.Errorf("write .git: %+v", r)
	}
	if r := s.List(".lush"); code(r) != "outside" {
		t.Errorf("list .lush: %+v", r)
	}
	if r := s.Read("data/q3.md"); !r.OK {
		t.Errorf("the rest of the project: %+v", r.Error)
	}
}
