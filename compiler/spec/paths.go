package spec

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// FileTools are the built-in tools confined to the paths: of their allowlist entry.
var FileTools = []string{"builtin/file_list", "builtin/file_read", "builtin/file_write"}

// IsFileTool reports whether ref (a normalized tool reference) is one of FileTools.
func IsFileTool(ref string) bool { return slices.Contains(FileTools, ref) }

// reservedDirs are the project directories no file tool may be given, with what they hold.
var reservedDirs = []struct{ dir, holds string }{
	{".git", "the repository"},
	{".lush", "the build output and secrets"},
}

// PathError is a path of a paths: list that is not allowed, with a hint on how to fix it.
type PathError struct {
	Path string // as written
	Msg  string // what is wrong, naming the path
	Hint string // how to fix it
}

func (e *PathError) Error() string { return e.Msg }

// CleanPath normalizes a project-relative path of a file tool's paths: list with path.Clean in
// slash form ("./data/" becomes "data", "." is the whole project). It rejects empty paths,
// absolute paths, backslashes, control characters (NUL included), any ".." element, leading or
// trailing spaces, and .git or .lush as the path or its first element.
func CleanPath(p string) (string, error) {
	bad := func(hint, format string, args ...any) (string, error) {
		return "", &PathError{Path: p, Msg: fmt.Sprintf(format, args...), Hint: hint}
	}
	switch {
	case strings.TrimSpace(p) == "":
		return bad(`write a directory or file relative to the project, such as data, or "." for the whole project`, "path %q is empty", p)
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return bad("remove the control characters from the path", "path %q contains a control character", p)
	case strings.TrimSpace(p) != p:
		return bad(fmt.Sprintf("write %q", strings.TrimSpace(p)), "path %q has leading or trailing spaces", p)
	case strings.Contains(p, `\`):
		return bad(fmt.Sprintf("separate directories with /: %q", strings.ReplaceAll(p, `\`, "/")), "path %q contains a backslash", p)
	case strings.HasPrefix(p, "/") || (len(p) >= 2 && p[1] == ':' && isLetter(p[0])):
		rel := strings.TrimLeft(p, "/")
		if rel == "" {
			rel = "."
		}
		if p[0] != '/' {
			rel = "data"
		}
		return bad(fmt.Sprintf("write it relative to the project directory, such as %q", rel), "path %q is absolute; paths are relative to the project", p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return bad("name a directory inside the project; file tools cannot leave it", "path %q contains \"..\"", p)
	}
	c := path.Clean(p)
	first, _, _ := strings.Cut(c, "/")
	if c == ".." || strings.HasPrefix(c, "../") {
		return bad("name a directory inside the project; file tools cannot leave it", "path %q contains \"..\"", p)
	}
	for _, r := range reservedDirs {
		if strings.EqualFold(first, r.dir) {
			return bad("name only the directories the tool needs; file tools can never reach "+r.dir,
				"path %q is inside %s, which holds %s", p, r.dir, r.holds)
		}
	}
	return c, nil
}

func isLetter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }
