// Package policies embeds Lush's base Rego library: the modules of package
// lush.authz that define data.lush.authz.decision, the one query that decides
// every MCP tool call, agent-to-agent call and loop access, together with the
// library's Rego unit tests.
//
// The library files are flat in this directory and are served under bundle
// paths "lush/authz/<file>.rego". The worked examples of project policies in
// examples/ are documentation and are not part of the library.
package policies

import (
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"path"
	"sort"
)

// bundleDir is the bundle directory of the library's modules (package lush.authz).
const bundleDir = "lush/authz"

// The library's modules, listed one by one so that neither the tests nor the
// examples are embedded with them (TestEmbeddedFiles checks the list is complete).
//
//go:embed agents.rego approvals.rego audit.rego budgets.rego classify.rego decision.rego input.rego limits.rego loops.rego mask.rego project.rego schema.rego serverreq.rego tools.rego writes.rego
var library embed.FS

// The library's Rego unit tests, served by Tests.
//
//go:embed *_test.rego
var tests embed.FS

// File is one Rego source file of the library.
type File struct {
	// Path is the file's bundle path, e.g. "lush/authz/decision.rego".
	Path string
	// Source is the file's Rego source.
	Source []byte
}

// Library returns the base library's files, sorted by Path. It does not
// include the library's tests (see Tests) nor the worked examples.
func Library() []File {
	return load(library)
}

// Tests returns the library's Rego unit tests (the *_test.rego files), sorted
// by Path. They run against the files of Library.
func Tests() []File {
	return load(tests)
}

// Digest returns "sha256:<hex>" over the library files (paths and contents),
// so builds can record which library they carry. Each file contributes its
// path and its source, both length-prefixed, in Path order.
func Digest() string {
	return digestOf(Library())
}

func digestOf(files []File) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		for _, b := range [][]byte{[]byte(f.Path), f.Source} {
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// load returns copies of the embedded files of fsys, sorted by bundle path.
func load(fsys embed.FS) []File {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		panic("policies: reading embedded files: " + err.Error())
	}
	files := make([]File, 0, len(entries))
	for _, e := range entries {
		src, err := fsys.ReadFile(e.Name())
		if err != nil {
			panic("policies: reading embedded " + e.Name() + ": " + err.Error())
		}
		files = append(files, File{Path: path.Join(bundleDir, e.Name()), Source: src})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files
}
