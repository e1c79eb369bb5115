package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/audit/export"
	"github.com/lush-agents/lush/policies/decisionlog"
)

func newAuditExportCmd() *cobra.Command {
	var f auditFlags
	var opaURL, otlpURL, tokenFile, out string
	var batch int
	var after int64
	cmd := &cobra.Command{
		Use:   "export (--opa-url URL | --otlp-url URL | --out FILE)",
		Short: "Export decisions to an OPA decision-log collector, an OTLP collector (logs) or a JSON-lines file",
		Long: `Export sends the decisions the filters select, oldest first, each with its completion:

  --opa-url URL   to a collector of OPA's decision-log HTTP protocol: POSTs of gzip-compressed
                  JSON arrays (--batch events each), as OPA's own decision-log plugin sends them,
                  so existing collectors accept them; --token-file holds a bearer token
  --otlp-url URL  to an OpenTelemetry collector as OTLP/HTTP logs (protobuf, to URL/v1/logs): one
                  log record per decision, in its trace, with the event as its body and the
                  fields queries use as attributes (WARN for denials, ERROR for errors)
  --out FILE      to a JSON-lines file ("-" for standard output), for an auditor's own tools

It reads the log page by page (any size). When an upload fails it stops, says how many were sent,
and prints the --after flag that resumes after the last event sent.

Exit codes: 0, 2 usage error, 3 the log cannot be read or an upload failed.`,
		Example: `  lushctl audit export --since 24h --opa-url https://collector.internal/logs --token-file /run/secrets/collector
  lushctl audit export --since 2026-11-01T00:00:00Z --until 2026-12-01T00:00:00Z --out november.jsonl`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if btoi(opaURL != "")+btoi(otlpURL != "")+btoi(out != "") != 1 {
				return usage("give exactly one of --opa-url, --otlp-url and --out")
			}
			if batch < 1 || batch > decisionlog.MaxLimit {
				return usage("--batch must be between 1 and %d, not %d", decisionlog.MaxLimit, batch)
			}
			for flag, u := range map[string]string{"--opa-url": opaURL, "--otlp-url": otlpURL} {
				if u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
					return usage("%s %q is not an http(s) URL", flag, u)
				}
			}
			token := ""
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return usage("--token-file: %v", err)
				}
				token = strings.TrimSpace(string(b))
			}
			filter, r, err := f.open()
			if err != nil {
				return err
			}
			defer r.Close()
			var w io.Writer
			if out == "-" {
				w = cmd.OutOrStdout()
			} else if out != "" {
				file, err := os.Create(out)
				if err != nil {
					return &exitError{code: exitRuntime, msg: err.Error()}
				}
				defer file.Close()
				w = file
			}
			client := &http.Client{Timeout: 30 * time.Second}
			filter.Oldest, filter.Limit, filter.AfterSeq = true, batch, after
			sent := 0
			for {
				recs, err := r.Query(cmd.Context(), filter)
				if err != nil {
					return err
				}
				if len(recs) == 0 {
					break
				}
				switch {
				case w != nil:
					err = export.JSONLines(w, recs)
				case opaURL != "":
					err = export.OPA(cmd.Context(), client, opaURL, token, recs)
				default:
					var headers map[string]string
					if token != "" {
						headers = map[string]string{"Authorization": "Bearer " + token}
					}
					err = export.OTLP(cmd.Context(), client, strings.TrimSuffix(otlpURL, "/"), headers, recs)
				}
				if err != nil {
					return &exitError{code: exitRuntime, msg: fmt.Sprintf("%v\n%d decisions were exported; resume with --after %d", err, sent, filter.AfterSeq)}
				}
				sent += len(recs)
				filter.AfterSeq = recs[len(recs)-1].Seq
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "exported %d decisions (the next export can start with --after %d)\n", sent, filter.AfterSeq)
			return nil
		},
	}
	f.register(cmd, decisionlog.MaxLimit, "ignored: export sends every decision the filters select (see --batch)")
	fl := cmd.Flags()
	fl.StringVar(&opaURL, "opa-url", "", "a collector of OPA's decision-log protocol")
	fl.StringVar(&otlpURL, "otlp-url", "", "an OpenTelemetry collector's OTLP/HTTP base URL (logs go to URL/v1/logs)")
	fl.StringVar(&tokenFile, "token-file", "", "a file holding the collector's bearer token")
	fl.StringVar(&out, "out", "", "a JSON-lines file (- for standard output)")
	fl.IntVar(&batch, "batch", 1000, "events per upload")
	fl.Int64Var(&after, "after", 0, "only events after this seq (resume an export)")
	return cmd
}
