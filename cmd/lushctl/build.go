package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/internal/buildstore"
	"github.com/lush-agents/lush/internal/diag"
)

type buildFlags struct {
	offline      bool
	timeout      time.Duration
	nodePrefix   []string
	out          string
	output       string
	quiet        bool
	check        bool
	signingKey   string
	signingAlg   string
	signingKeyID string
}

func (f *buildFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&f.offline, "offline", false, "skip the MCP server reachability check")
	fl.DurationVar(&f.timeout, "timeout", 20*time.Second, "reachability timeout per MCP server")
	fl.StringArrayVar(&f.nodePrefix, "node-prefix", nil, "directory with npm packages installed (npm install --prefix DIR); repeatable; default $LUSH_NODE_PREFIX")
}

// options turns the flags into compiler options.
func (f *buildFlags) options(progress func(string)) ([]compiler.Option, error) {
	prefixes := f.nodePrefix
	if len(prefixes) == 0 {
		if env := os.Getenv("LUSH_NODE_PREFIX"); env != "" {
			prefixes = filepath.SplitList(env)
		}
	}
	opts := []compiler.Option{compiler.Offline(f.offline), compiler.ReachTimeout(f.timeout), compiler.NodePrefixes(prefixes...), compiler.Progress(progress)}
	if f.signingKey != "" {
		key, err := os.ReadFile(f.signingKey)
		if err != nil {
			return nil, usage("--signing-key: %v", err)
		}
		opts = append(opts, compiler.Sign(&compiler.SigningKey{Key: string(key), Algorithm: f.signingAlg, KeyID: f.signingKeyID}))
	}
	return opts, nil
}

func newBuildCmd() *cobra.Command {
	var f buildFlags
	cmd := &cobra.Command{
		Use:   "build [dir]",
		Short: "Validate a project and build its manifest and OPA bundle",
		Long: `Build validates the whole project in one pass (parsing and schema, models, tools and MCP
server reachability, skills and skills.lock, references, ACLs), reports every problem with its
file:line and a suggestion, and writes a content-addressed build:

  .lush/build/<hash>.json    the manifest
  .lush/build/<hash>.tar.gz  a standard OPA bundle (revision = hash)

The hash is printed on standard output; diagnostics and progress go to standard error.
The same inputs give the same hash on every machine.`,
		Example: `  lushctl build examples/quickstart
  lushctl build --offline -o json .
  hash=$(lushctl build -q) && lushctl policy eval --build "$hash" ...
  lushctl build --signing-key key.pem --signing-key-id ci .`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			dir := projectDir(a)
			stderr := cmd.ErrOrStderr()
			progress := func(msg string) {
				if f.output == "text" && !f.quiet {
					fmt.Fprintln(stderr, msg)
				}
			}
			opts, err := f.options(progress)
			if err != nil {
				return err
			}
			res, err := compiler.Build(cmd.Context(), dir, opts...)
			if err != nil {
				return err
			}
			store := buildstore.ForProject(dir)
			if f.out != "" {
				store = buildstore.Open(f.out)
			}
			if res.OK() && !f.check {
				if err := store.Save(res.Hash, res.ManifestJSON, res.Bundle); err != nil {
					return err
				}
			}
			if f.output == "json" {
				return writeBuildJSON(cmd, res, store, f.check)
			}
			if !f.quiet || !res.OK() {
				if err := diag.WriteText(stderr, res.Diagnostics); err != nil {
					return err
				}
			}
			if !res.OK() {
				fmt.Fprintf(stderr, "\nbuild failed: %s\n", diag.Summary(res.Errors, res.Warnings))
				return &exitError{code: exitFailed}
			}
			if !f.quiet {
				m := res.Manifest
				fmt.Fprintf(stderr, "%s✓ built %s: %s, %s, %s, %s (%s)\n", sep(res), m.Project,
					diag.Plural(len(m.Agents), "agent"), diag.Plural(len(m.Loops), "loop"), diag.Plural(len(m.Tools), "tool"),
					diag.Plural(len(m.Grants), "grant"), diag.Plural(res.Warnings, "warning"))
				if !f.check {
					fmt.Fprintf(stderr, "  manifest %s\n  bundle   %s\n", rel(store.ManifestPath(res.Hash)), rel(store.BundlePath(res.Hash)))
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), res.Hash)
			return nil
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "", "build directory (default <dir>/.lush/build)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print only the hash (and errors)")
	fl.BoolVar(&f.check, "check", false, "validate only: write nothing")
	fl.StringVar(&f.signingKey, "signing-key", "", "sign the bundle with this PEM private key (or HMAC secret file for HS256)")
	fl.StringVar(&f.signingAlg, "signing-alg", "RS256", "signing algorithm: RS256, RS384, RS512, ES256, ES384, ES512, PS256, HS256, …")
	fl.StringVar(&f.signingKeyID, "signing-key-id", "default", "key id recorded in the signature")
	outputFlag(cmd, &f.output)
	return cmd
}

func sep(res *compiler.Result) string {
	if len(res.Diagnostics) > 0 {
		return "\n"
	}
	return ""
}

// rel shortens a path relative to the working directory for display.
func rel(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

func writeBuildJSON(cmd *cobra.Command, res *compiler.Result, store *buildstore.Store, check bool) error {
	out := struct {
		Project     string            `json:"project"`
		OK          bool              `json:"ok"`
		Hash        string            `json:"hash,omitempty"`
		Manifest    string            `json:"manifest,omitempty"`
		Bundle      string            `json:"bundle,omitempty"`
		Errors      int               `json:"errors"`
		Warnings    int               `json:"warnings"`
		Diagnostics []diag.Diagnostic `json:"diagnostics"`
	}{Project: res.Project, OK: res.OK(), Hash: res.Hash, Errors: res.Errors, Warnings: res.Warnings, Diagnostics: res.Diagnostics}
	if out.Diagnostics == nil {
		out.Diagnostics = []diag.Diagnostic{}
	}
	if res.OK() && !check {
		out.Manifest, out.Bundle = store.ManifestPath(res.Hash), store.BundlePath(res.Hash)
	}
	if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
		return err
	}
	if !res.OK() {
		return &exitError{code: exitFailed}
	}
	return nil
}
