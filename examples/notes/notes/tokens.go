package notes

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// digest is the SHA-256 of a token: the only form in which tokens are kept in memory.
type digest [sha256.Size]byte

// tokens holds the accounts of a tokens file and re-reads the file when it changes.
type tokens struct {
	path  string
	every time.Duration // how often a lookup may look at the file's modification time
	log   *slog.Logger

	mu       sync.Mutex
	checked  time.Time // when the file was last looked at
	modTime  time.Time // the modification time and size of the file last read
	size     int64
	accounts map[string]digest
}

// loadTokens reads a tokens file; see parseTokens for its format.
func loadTokens(path string, log *slog.Logger) (*tokens, error) {
	t := &tokens{path: path, every: time.Second, log: log}
	accounts, info, err := readTokens(path)
	if err != nil {
		return nil, err
	}
	t.accounts, t.modTime, t.size, t.checked = accounts, info.ModTime(), info.Size(), time.Now()
	return t, nil
}

// count returns how many accounts the file holds.
func (t *tokens) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.accounts)
}

// account returns the account whose token is token, re-reading the file first if it changed.
func (t *tokens) account(token string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refresh()
	sum := digest(sha256.Sum256([]byte(token)))
	found := ""
	for name, want := range t.accounts { // no early exit: every account costs the same
		if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
			found = name
		}
	}
	return found, found != ""
}

// refresh re-reads the file if it changed since it was last read, looking at most once every
// t.every. A file that no longer parses is reported and the accounts read before are kept.
// t.mu must be held.
func (t *tokens) refresh() {
	now := time.Now()
	if now.Sub(t.checked) < t.every {
		return
	}
	t.checked = now
	info, err := os.Stat(t.path)
	if err != nil {
		t.log.Warn("notes: cannot look at the tokens file; keeping its previous accounts", "err", err)
		return
	}
	if info.ModTime().Equal(t.modTime) && info.Size() == t.size {
		return
	}
	accounts, info, err := readTokens(t.path)
	if err != nil {
		t.log.Warn("notes: tokens file changed but does not load; keeping its previous accounts", "err", err)
		if info != nil { // report this version once, not on every look
			t.modTime, t.size = info.ModTime(), info.Size()
		}
		return
	}
	t.accounts, t.modTime, t.size = accounts, info.ModTime(), info.Size()
	t.log.Info("notes: reloaded the tokens file", "path", t.path, "accounts", len(accounts))
}

// readTokens opens and parses a tokens file. The file's info is returned whenever it could be
// opened, even when it does not parse.
func readTokens(path string) (map[string]digest, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err // names the file
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	accounts, err := parseTokens(path, f)
	return accounts, info, err
}

// parseTokens parses a tokens file: one account a line, "<account> <token>", separated by
// spaces or tabs; blank lines and lines starting with # are ignored. Each account and each token
// may appear once. Errors name file:line and never quote the line, which may hold a token.
func parseTokens(name string, r io.Reader) (map[string]digest, error) {
	accounts := map[string]digest{}
	accountLine := map[string]int{}
	tokenOwner := map[digest]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf(`%s:%d: want 2 fields, "<account> <token>"; found %d`, name, n, len(fields))
		}
		account, sum := fields[0], digest(sha256.Sum256([]byte(fields[1])))
		if first, dup := accountLine[account]; dup {
			return nil, fmt.Errorf("%s:%d: account %q is already given on line %d", name, n, account, first)
		}
		if other, dup := tokenOwner[sum]; dup {
			return nil, fmt.Errorf("%s:%d: account %q has the same token as account %q (line %d)",
				name, n, account, other, accountLine[other])
		}
		accounts[account], accountLine[account], tokenOwner[sum] = sum, n, account
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return accounts, nil
}
