// Package files runs Lush's built-in file tools (seed 003), file_read, file_write and file_list,
// inside a Sandbox: the project directory and the paths an agent's allowlist gives the tool. A
// requested path is taken relative to the project (an absolute path is taken as it is), `..`
// elements are refused outright, and the path is resolved with symlinks followed: its real path
// must be an allowed path's real path or lie below one, so a symlink that leads outside is refused
// like any other path outside. Every outcome, failures included, is a Result the model can read.
package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"
)

// Defaults.
const (
	DefaultMaxRead    = 1 << 20
	DefaultMaxWrite   = 1 << 20
	DefaultMaxEntries = 1000
)

// reserved are the project's directories no file tool may touch.
var reserved = []string{".lush", ".git"}

// Sandbox is where the file tools may act.
type Sandbox struct {
	Root       string   // the project directory, absolute
	Allowed    []string // project-relative paths (directories or files) the tool may touch
	MaxRead    int      // bytes file_read returns at most (default DefaultMaxRead)
	MaxWrite   int      // bytes file_write accepts at most (default DefaultMaxWrite)
	MaxEntries int      // entries file_list returns at most (default DefaultMaxEntries)
}

// Result is a file tool's output.
type Result struct {
	OK        bool    `json:"ok"`
	Path      string  `json:"path,omitempty"`      // project-relative
	Content   *string `json:"content,omitempty"`   // file_read
	Size      int64   `json:"size,omitempty"`      // file_read, file_write: the file's size in bytes
	Truncated bool    `json:"truncated,omitempty"` // file_read: content is the first MaxRead bytes
	Entries   []Entry `json:"entries,omitempty"`   // file_list
	Error     *Error  `json:"error,omitempty"`
}

// Entry is one directory entry.
type Entry struct {
	Name string `json:"name"`
	Type string `json:"type"` // file, dir, symlink, other
	Size int64  `json:"size"`
}

// Error is why a file tool did not do what it was asked.
type Error struct {
	Code    string `json:"code"` // invalid_path, outside, not_found, not_a_file, not_a_directory, binary, too_large, io
	Message string `json:"message"`
}

func failed(code, format string, args ...any) Result {
	return Result{Error: &Error{Code: code, Message: fmt.Sprintf(format, args...)}}
}

// pathError is a refusal with its code.
type pathError struct{ code, msg string }

func (e *pathError) Error() string { return e.msg }

func refuse(code, format string, args ...any) error {
	return &pathError{code, fmt.Sprintf(format, args...)}
}

func result(err error) Result {
	var pe *pathError
	if errors.As(err, &pe) {
		return failed(pe.code, "%s", pe.msg)
	}
	return failed("io", "%v", err)
}

// Read returns the text of the file at path.
func (s *Sandbox) Read(path string) Result {
	real, rel, err := s.resolve(path, false)
	if err != nil {
		return result(err)
	}
	f, err := os.Open(real)
	if err != nil {
		return result(s.ioError(path, err))
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return result(s.ioError(path, err))
	}
	if !info.Mode().IsRegular() {
		return failed("not_a_file", "%s is not a file (file_list lists a directory)", path)
	}
	max := orDefault(s.MaxRead, DefaultMaxRead)
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return result(s.ioError(path, err))
	}
	res := Result{OK: true, Path: rel, Size: info.Size()}
	if len(data) > max {
		data, res.Truncated = data[:max], true
		for i := 0; i < utf8.UTFMax-1 && len(data) > 0; i++ { // a rune cut in two
			if r, size := utf8.DecodeLastRune(data); r != utf8.RuneError || size != 1 {
				break
			}
			data = data[:len(data)-1]
		}
	}
	if !utf8.Valid(data) {
		return failed("binary", "%s is not text (%d bytes): file_read returns UTF-8 text only", path, info.Size())
	}
	text := string(data)
	res.Content = &text
	return res
}

// Write writes content to the file at path, creating it and its missing directories (inside the
// allowed paths), replacing it or, with appendTo, adding to its end.
func (s *Sandbox) Write(path, content string, appendTo bool) Result {
	if max := orDefault(s.MaxWrite, DefaultMaxWrite); len(content) > max {
		return failed("too_large", "the content is %d bytes; file_write takes at most %d", len(content), max)
	}
	real, rel, err := s.resolve(path, true)
	if err != nil {
		return result(err)
	}
	if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
		return result(s.ioError(path, err))
	}
	flags := os.O_WRONLY | os.O_CREATE | syscall.O_NOFOLLOW // the last element cannot be swapped for a symlink
	if appendTo {
		flags |= os.O_APPEND
	} else {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(real, flags, 0o644)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return failed("outside", "%s is a symbolic link: file_write does not write through links", path)
		}
		return result(s.ioError(path, err))
	}
	_, werr := f.WriteString(content)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return result(s.ioError(path, err))
	}
	info, err := os.Stat(real)
	if err != nil {
		return result(s.ioError(path, err))
	}
	return Result{OK: true, Path: rel, Size: info.Size()}
}

// List lists the directory at path (not recursively): names, types and sizes, sorted by name.
// Symlinks are listed as such, not followed.
func (s *Sandbox) List(path string) Result {
	if path == "" {
		path = "."
	}
	real, rel, err := s.resolve(path, false)
	if err != nil {
		return result(err)
	}
	info, err := os.Stat(real)
	if err != nil {
		return result(s.ioError(path, err))
	}
	if !info.IsDir() {
		return failed("not_a_directory", "%s is not a directory (file_read reads a file)", path)
	}
	des, err := os.ReadDir(real)
	if err != nil {
		return result(s.ioError(path, err))
	}
	res := Result{OK: true, Path: rel, Entries: []Entry{}}
	max := orDefault(s.MaxEntries, DefaultMaxEntries)
	for _, de := range des {
		if len(res.Entries) == max {
			res.Truncated = true
			break
		}
		e := Entry{Name: de.Name(), Type: "other"}
		switch t := de.Type(); {
		case t&fs.ModeSymlink != 0:
			e.Type = "symlink"
		case t.IsDir():
			e.Type = "dir"
		case t.IsRegular():
			e.Type = "file"
			if fi, err := de.Info(); err == nil {
				e.Size = fi.Size()
			}
		}
		res.Entries = append(res.Entries, e)
	}
	return res
}

// resolve checks path and returns its real path and its project-relative form. For a write the
// file may not exist: its nearest existing ancestor is resolved instead, and the rest appended.
//
// A path outside the allowed paths is refused (outside) whether or not it exists, so the answer
// tells nothing about the filesystem beyond them: as written, it must lie in an allowed path
// before anything is looked up; resolved (symlinks followed), it must still; and a path that
// does not exist is not_found only when its nearest existing ancestor is inside.
func (s *Sandbox) resolve(path string, forWrite bool) (real, rel string, err error) {
	switch {
	case path == "":
		return "", "", refuse("invalid_path", "the path is empty")
	case strings.ContainsRune(path, 0):
		return "", "", refuse("invalid_path", "the path contains a NUL byte")
	case slices.Contains(strings.Split(filepath.ToSlash(path), "/"), ".."):
		return "", "", refuse("invalid_path", "%s contains \"..\": name the file by its path in the project", path)
	}
	full := path
	if !filepath.IsAbs(full) {
		full = filepath.Join(s.Root, full)
	}
	full = filepath.Clean(full)
	b := s.bounds()
	if err := b.check(path, full); err != nil {
		return "", "", err
	}
	if forWrite {
		real, err = realPathOfNew(full)
	} else {
		real, err = filepath.EvalSymlinks(full)
	}
	if errors.Is(err, fs.ErrNotExist) {
		// Missing, or missing where a symlink leads: the nearest existing ancestor says which, and
		// when it cannot be resolved either (a dangling link), the path is not known to be inside.
		nearest, nerr := realPathOfNew(full)
		if nerr != nil {
			return "", "", refuse("outside", "%s is outside the paths this tool may use (%s)", path, b.names)
		}
		if err := b.check(path, nearest); err != nil {
			return "", "", err
		}
		return "", "", refuse("not_found", "%s does not exist", path)
	}
	if err != nil {
		return "", "", err
	}
	if err := b.check(path, real); err != nil {
		return "", "", err
	}
	if rel, err = filepath.Rel(b.realRoot, real); err != nil {
		return "", "", err
	}
	return real, filepath.ToSlash(rel), nil
}

// bounds are where a sandbox's files may be: the project directory and the allowed paths, each
// both as configured and as real paths (symlinks resolved), so that a path written either way
// can be checked as a string.
type bounds struct {
	roots    []string // the project directory as configured, and its real path
	allowed  []string // each allowed path under the root as configured, and its real path
	names    string   // the allowed paths as configured, for messages
	realRoot string   // the project directory's real path ("" when it cannot be resolved)
}

func (s *Sandbox) bounds() bounds {
	root := filepath.Clean(s.Root)
	b := bounds{roots: []string{root}, names: strings.Join(s.Allowed, ", ")}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		b.realRoot = r
		b.roots = append(b.roots, r)
	}
	for _, a := range s.Allowed {
		at := filepath.Join(root, filepath.FromSlash(a))
		b.allowed = append(b.allowed, at)
		if r, err := filepath.EvalSymlinks(at); err == nil {
			b.allowed = append(b.allowed, r)
		} else if b.realRoot != "" {
			// An allowed directory that does not exist yet: its place in the real root.
			b.allowed = append(b.allowed, filepath.Join(b.realRoot, filepath.FromSlash(a)))
		}
	}
	return b
}

// check refuses p (clean and absolute) unless it is an allowed path or lies below one, and is
// not in a directory the file tools never touch. It compares strings and looks nothing up.
func (b bounds) check(path, p string) error {
	if !slices.ContainsFunc(b.allowed, func(a string) bool { return within(p, a) }) {
		return refuse("outside", "%s is outside the paths this tool may use (%s)", path, b.names)
	}
	// Lush's own files (the decision log, keys, local credentials) and the repository's are never
	// a file tool's, even under `paths: [.]`.
	for _, root := range b.roots {
		if !within(p, root) {
			continue
		}
		rel, _ := filepath.Rel(root, p)
		if first, _, _ := strings.Cut(filepath.ToSlash(rel), "/"); slices.Contains(reserved, strings.ToLower(first)) {
			return refuse("outside", "%s is in %s, which the file tools never touch", path, first)
		}
	}
	return nil
}

// within reports whether p is dir or lies below it (both clean and absolute).
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// realPathOfNew resolves the longest existing prefix of full and appends the rest.
func realPathOfNew(full string) (string, error) {
	rest := ""
	dir := full
	for {
		if _, err := os.Lstat(dir); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fs.ErrNotExist
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	if rest == "" {
		// The file exists: a symlink as the last element is not written through (O_NOFOLLOW),
		// but its directory must be inside.
		if info, err := os.Lstat(full); err == nil && info.Mode()&fs.ModeSymlink != 0 {
			parent, err := filepath.EvalSymlinks(filepath.Dir(full))
			if err != nil {
				return "", err
			}
			return filepath.Join(parent, filepath.Base(full)), nil
		}
		return real, nil
	}
	return filepath.Join(real, rest), nil
}

// ioError turns an operating-system error into a message that names the requested path only.
func (s *Sandbox) ioError(path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return refuse("not_found", "%s does not exist", path)
	case errors.Is(err, fs.ErrPermission):
		return refuse("io", "%s: permission denied", path)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return refuse("io", "%s: %v", path, pe.Err)
	}
	return refuse("io", "%s: %v", path, err)
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}
