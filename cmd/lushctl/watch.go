package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/manifest"
)

// watchInterval is how often `lushctl gateway --watch` looks for changed project files.
const watchInterval = time.Second

// watchProject rebuilds the project in dir whenever one of its files changes, and deploys the
// new build, which the gateway (following the store) then swaps in. A project that does not
// build is reported with its diagnostics on w, and the current build keeps serving. It returns
// when ctx ends.
func watchProject(ctx context.Context, dir string, store *buildstore.Store, w io.Writer, logger *slog.Logger) {
	last, _ := fingerprint(dir)
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		fp, err := fingerprint(dir)
		if err != nil || fp == last {
			continue
		}
		last = fp
		res, err := compiler.Build(ctx, dir, compiler.Offline(true))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			logger.Error("watch: rebuild failed; the current build keeps serving", "error", err)
			continue
		case !res.OK():
			_ = diag.WriteText(w, res.Diagnostics)
			logger.Error("watch: the project does not build; the current build keeps serving",
				"problems", diag.Summary(res.Errors, res.Warnings))
			continue
		}
		if cur, _ := store.Current(); cur == res.Hash {
			continue // a change that does not change the build (a data file, say)
		}
		if err := store.Save(res.Hash, res.ManifestJSON, res.Bundle); err != nil {
			logger.Error("watch: cannot keep the new build", "error", err)
			continue
		}
		if err := store.Deploy(res.Hash); err != nil {
			logger.Error("watch: cannot deploy the new build", "error", err)
			continue
		}
		logger.Info("watch: project changed; deployed the new build", "build", manifest.Short(res.Hash))
	}
}

// fingerprint summarizes the names, sizes and modification times of the project's files,
// leaving out hidden directories (.lush, .git) and node_modules.
func fingerprint(dir string) (uint64, error) {
	h := fnv.New64a()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walk
			}
			return err
		}
		if d.IsDir() {
			if path != dir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\n", path, info.Size(), info.ModTime().UnixNano())
		return nil
	})
	return h.Sum64(), err
}
