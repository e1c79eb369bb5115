package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/internal/modelref"
	"github.com/lush-agents/lush/vault"
)

// isModelKey reports whether an auth argument names a model provider's key (model://<name>).
func isModelKey(s string) bool { return strings.HasPrefix(s, modelref.Scheme) }

// modelKeyTarget checks a model://<name> argument and the flags that apply to it: a model key is
// an api_key stored for modelref.KeyPrincipal, the process that runs agents.
func modelKeyTarget(f *authFlags, addr, typ, header, username string, env []string) error {
	if err := checkOutput(f.output); err != nil {
		return err
	}
	if _, ok := modelref.ParseCredential(addr); !ok {
		return usage("%s: write model://<name>, where name is a provider (%s) or the credential: of a models: entry in lush.yaml (lower-case letters, digits, '.', '_', '-')",
			addr, strings.Join(modelref.Providers, ", "))
	}
	switch {
	case f.principal != "" && f.principal != modelref.KeyPrincipal:
		return usage("--principal: model keys belong to the process that runs agents (%s), not to a person; leave --principal out", modelref.KeyPrincipal)
	case typ != "" && typ != vault.TypeAPIKey:
		return usage("--type: a model key is an api_key; leave --type out")
	case header != "" || username != "" || len(env) > 0:
		return usage("--header, --username and --env do not apply to model keys (the provider's client sends the key)")
	}
	return nil
}

// addModelKey stores a model provider's API key, read like any secret.
func addModelKey(cmd *cobra.Command, f *authFlags, addr string) error {
	c := vault.Credential{Type: vault.TypeAPIKey}
	if err := readSecret(cmd, &c, nil); err != nil {
		return err
	}
	if err := c.Check(); err != nil {
		return usage("%v", err)
	}
	file := f.file()
	replaced, err := file.Add(vault.FileEntry{Tool: addr, Principal: modelref.KeyPrincipal, Credential: c})
	if err != nil {
		return err
	}
	if f.output == "json" {
		return writeJSON(cmd.OutOrStdout(), map[string]any{"tool": addr, "principal": modelref.KeyPrincipal, "type": c.Type, "file": file.Path(), "replaced": replaced})
	}
	verb := "added"
	if replaced {
		verb = "replaced"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s the model key %s in %s (agents read it at their next request)\n", verb, addr, file.Path())
	return nil
}

// removeModelKey deletes a model provider's API key.
func removeModelKey(cmd *cobra.Command, f *authFlags, addr string) error {
	if err := modelKeyTarget(f, addr, "", "", "", nil); err != nil {
		return err
	}
	file := f.file()
	removed, err := file.Remove(addr, modelref.KeyPrincipal)
	if err != nil {
		return err
	}
	if f.output == "json" {
		if err := writeJSON(cmd.OutOrStdout(), map[string]any{"tool": addr, "principal": modelref.KeyPrincipal, "removed": removed}); err != nil {
			return err
		}
	}
	if !removed {
		return failed("%s holds no model key %s", file.Path(), addr)
	}
	if f.output != "json" {
		fmt.Fprintf(cmd.OutOrStdout(), "removed the model key %s from %s\n", addr, file.Path())
	}
	return nil
}
