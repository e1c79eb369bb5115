package main

import (
	"encoding/json"
	"io"

	"github.com/spf13/cobra"
)

// outputFlag adds --output text|json to a command.
func outputFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVarP(dst, "output", "o", "text", "output format: text or json")
}

func checkOutput(format string) error {
	if format != "text" && format != "json" {
		return usage("--output must be text or json, not %q", format)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
