package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// maxDirBytes bounds the total size of a directory digested by DigestDir.
const maxDirBytes = 64 << 20

// DigestDir hashes a directory (a local tool's or a skill's): every regular file's relative
// path, executable bit and content, in path order, with CRLF turned into LF in text files, so the
// digest is the same on every machine and checkout. Symbolic links are refused, so nothing
// outside the directory can change what it does.
func DigestDir(dir string) (string, error) {
	h := sha256.New()
	var total int64
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symbolic link; only regular files are allowed", rel)
		case e.IsDir():
			if e.Name() == ".git" {
				return fs.SkipDir
			}
			return nil
		case !e.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", rel)
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if total += info.Size(); total > maxDirBytes {
			return fmt.Errorf("directory holds more than %d bytes", maxDirBytes)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		mode := "-"
		if info.Mode()&0o111 != 0 {
			mode = "x"
		}
		sum := sha256.Sum256(normalizeText(rel, data))
		fmt.Fprintf(h, "%s\x00%s\x00%x\n", rel, mode, sum)
		return nil
	})
	if err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
