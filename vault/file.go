package vault

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"time"
)

// LocalFile is where a project keeps the credentials of people working on a laptop, relative to
// the project directory.
const LocalFile = ".lush/credentials.local"

// fileVersion is the format version of the credentials file.
const fileVersion = 1

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// File is the local credentials file (.lush/credentials.local): JSON, mode 0600, written by
// `lushctl auth add` and read by the gateway. A file that others can read is refused. Reads are
// cached and the file is read again when it changes, so a running gateway sees `auth add` at once.
type File struct {
	path string

	mu      sync.Mutex
	stamp   fileStamp
	entries []FileEntry
	err     error
}

// FileEntry is one credential of the file: what it is for, and the credential.
type FileEntry struct {
	Tool       string
	Principal  string
	Added      time.Time
	Credential Credential
}

// fileRecord is an entry as stored. Credential's own JSON encoding hides the secret, so the file
// has its own.
type fileRecord struct {
	Tool      string            `json:"tool"`
	Principal string            `json:"principal"`
	Type      string            `json:"type"`
	Token     string            `json:"token,omitempty"`
	Header    string            `json:"header,omitempty"`
	Key       string            `json:"key,omitempty"`
	Username  string            `json:"username,omitempty"`
	Password  string            `json:"password,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	// An OAuth grant (flow authorization_code): the refresh token, when the access token
	// expires, and the authorization server that issued them.
	RefreshToken string     `json:"refresh_token,omitempty"`
	Expiry       *time.Time `json:"expiry,omitempty"`
	Issuer       string     `json:"issuer,omitempty"`
	Added        time.Time  `json:"added"`
}

type fileContents struct {
	Version     int          `json:"version"`
	Credentials []fileRecord `json:"credentials"`
}

type fileStamp struct {
	ok      bool
	mod     time.Time
	size    int64
	ino     uint64
	changed time.Time
}

// OpenFile returns the credentials file at path. The file need not exist.
func OpenFile(path string) *File { return &File{path: path} }

// Path is the file's path.
func (f *File) Path() string { return f.path }

// Entries returns the file's credentials. A missing file has none.
func (f *File) Entries() ([]FileEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := os.Stat(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		f.stamp, f.entries, f.err = fileStamp{}, nil, nil
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read credentials %s: %w", f.path, err)
	}
	stamp := stampOf(st)
	if f.stamp.ok && stamp == f.stamp {
		return f.entries, f.err
	}
	f.entries, f.err = readFile(f.path, st)
	f.stamp = stamp
	return f.entries, f.err
}

func stampOf(st fs.FileInfo) fileStamp {
	s := fileStamp{ok: true, mod: st.ModTime(), size: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino = sys.Ino
		s.changed = time.Unix(sys.Ctim.Sec, sys.Ctim.Nsec) // chmod changes it too
	}
	return s
}

// Lookup returns the credential for tool and principal.
func (f *File) Lookup(tool, principal string) (Credential, bool, error) {
	entries, err := f.Entries()
	if err != nil {
		return Credential{}, false, err
	}
	for _, e := range entries {
		if e.Tool == tool && e.Principal == principal {
			return e.Credential, true, nil
		}
	}
	return Credential{}, false, nil
}

// readFile reads and checks the file. st is its Stat.
func readFile(path string, st fs.FileInfo) ([]FileEntry, error) {
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("credentials %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("credentials %s can be read by others (mode %04o), so it is not used: run chmod 600 %s", path, perm, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read credentials %s: %w", path, err)
	}
	var c fileContents
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		// The decoder's messages quote field names and types, never values.
		return nil, fmt.Errorf("credentials %s is not valid (%s); remove it and add the credentials again with lushctl auth add", path, jsonProblem(data, err))
	}
	if c.Version != fileVersion {
		return nil, fmt.Errorf("credentials %s has version %d; this Lush reads version %d", path, c.Version, fileVersion)
	}
	out := make([]FileEntry, 0, len(c.Credentials))
	for i, r := range c.Credentials {
		e := FileEntry{Tool: r.Tool, Principal: r.Principal, Added: r.Added, Credential: Credential{
			Type: r.Type, Token: r.Token, Header: r.Header, Key: r.Key, Username: r.Username, Password: r.Password, Env: r.Env,
			RefreshToken: r.RefreshToken, Issuer: r.Issuer, Source: "file " + path,
		}}
		if r.Expiry != nil {
			e.Credential.Expiry = *r.Expiry
		}
		if err := e.check(); err != nil {
			return nil, fmt.Errorf("credentials %s: credentials[%d]: %w", path, i, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// jsonProblem describes a decoding error without quoting the file's content.
func jsonProblem(data []byte, err error) string {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		line := 1 + bytes.Count(data[:min(int(syn.Offset), len(data))], []byte("\n"))
		return fmt.Sprintf("line %d: invalid JSON", line)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return fmt.Sprintf("field %s must be a %s", typ.Field, typ.Type)
	}
	return err.Error()
}

// check validates an entry.
func (e FileEntry) check() error {
	if e.Tool == "" || e.Principal == "" {
		return errors.New("tool and principal are required")
	}
	return e.Credential.Check()
}

// Check reports what a credential of its type is missing.
func (c Credential) Check() error {
	need := func(field, v string) error {
		if v == "" {
			return fmt.Errorf("type %s needs a %s", c.Type, field)
		}
		return nil
	}
	switch c.Type {
	case TypeBearer, TypeOAuth:
		return need("token", c.Token)
	case TypeAPIKey:
		return need("key", c.Key)
	case TypeBasic:
		if err := need("username", c.Username); err != nil {
			return err
		}
		return need("password", c.Password)
	case TypeEnv:
		if len(c.Env) == 0 {
			return errors.New("type env needs at least one variable")
		}
		for k := range c.Env {
			if !envName.MatchString(k) {
				return fmt.Errorf("%q is not an environment variable name", k)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown type %q: use one of %v", c.Type, Types)
}

// Add stores a credential for (e.Tool, e.Principal), replacing the one there was. It reports
// whether one was replaced.
func (f *File) Add(e FileEntry) (replaced bool, err error) {
	if err := e.check(); err != nil {
		return false, err
	}
	if e.Added.IsZero() {
		e.Added = time.Now().UTC().Truncate(time.Second)
	}
	err = f.update(func(entries []FileEntry) []FileEntry {
		i := slices.IndexFunc(entries, func(x FileEntry) bool { return x.Tool == e.Tool && x.Principal == e.Principal })
		if i >= 0 {
			replaced = true
			entries[i] = e
			return entries
		}
		return append(entries, e)
	})
	return replaced, err
}

// Remove deletes the credential for (tool, principal) and reports whether there was one.
func (f *File) Remove(tool, principal string) (removed bool, err error) {
	err = f.update(func(entries []FileEntry) []FileEntry {
		return slices.DeleteFunc(entries, func(x FileEntry) bool {
			if x.Tool == tool && x.Principal == principal {
				removed = true
				return true
			}
			return false
		})
	})
	return removed, err
}

// update rewrites the file under an exclusive lock: read, change, write a new file with mode
// 0600, rename it into place.
func (f *File) update(change func([]FileEntry) []FileEntry) error {
	dir := filepath.Dir(f.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	lock, err := os.OpenFile(f.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("lock credentials %s: %w", f.path, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock credentials %s: %w", f.path, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	var entries []FileEntry
	st, err := os.Stat(f.path)
	switch {
	case err == nil:
		if entries, err = readFile(f.path, st); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("read credentials %s: %w", f.path, err)
	}
	entries = change(slices.Clone(entries))
	c := fileContents{Version: fileVersion, Credentials: make([]fileRecord, 0, len(entries))}
	for _, e := range entries {
		k := e.Credential
		r := fileRecord{Tool: e.Tool, Principal: e.Principal, Type: k.Type, Token: k.Token,
			Header: k.Header, Key: k.Key, Username: k.Username, Password: k.Password, Env: k.Env,
			RefreshToken: k.RefreshToken, Issuer: k.Issuer, Added: e.Added}
		if !k.Expiry.IsZero() {
			exp := k.Expiry.UTC()
			r.Expiry = &exp
		}
		c.Credentials = append(c.Credentials, r)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode credentials: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".credentials-*")
	if err != nil {
		return fmt.Errorf("write credentials %s: %w", f.path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write credentials %s: %w", f.path, err)
	}
	_, werr := tmp.Write(append(data, '\n'))
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("write credentials %s: %w", f.path, err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return fmt.Errorf("write credentials %s: %w", f.path, err)
	}
	return nil
}
