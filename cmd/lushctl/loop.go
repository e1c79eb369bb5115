package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/scheduler"
)

// firingTime is the layout of a firing's time, printed in UTC (which the output says) to the
// millisecond.
const firingTime = "2006-01-02 15:04:05.000"

// loopClient talks to a running server's scheduler API (/loops).
type loopClient struct{ apiClient }

func newLoopCmd() *cobra.Command {
	c := &loopClient{apiClient{api: "the scheduler API"}}
	cmd := &cobra.Command{
		Use:   "loop",
		Short: "List, inspect and trigger loops (scheduled agent invocations) of a running server",
		Long: `Loop talks to a running Lush server (lushctl run or lushctl serve) about its loops: the scheduled
invocations declared in loops/<name>.yaml. Times are printed in UTC (-o json: RFC 3339).

Every request is authenticated (--token or LUSH_TOKEN; a dev-mode server needs none) and decided by
the project's policy like any other call: listing and reading history need read (or execute) in the
loop's acl, triggering needs execute. Each decision is in the decision log.

Exit codes: 0 success; 1 denied by policy, or a triggered firing that did not succeed; 2 usage;
3 the server could not be reached or failed.`,
		Example: `  lushctl loop list
  lushctl loop history hourly-notes --limit 20
  lushctl loop trigger hourly-notes --instruction "Summarize only today's notes"
  LUSH_URL=https://lush.internal LUSH_TOKEN=$TOKEN lushctl loop list -o json`,
	}
	c.flags(cmd)
	cmd.AddCommand(c.listCmd(), c.historyCmd(), c.triggerCmd())
	return cmd
}

func (c *loopClient) listCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List the loops you may read, with their schedule, next firing and last result",
		Example: "  lushctl loop list\n  lushctl loop list -o json",
		Args:    args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp struct {
				Loops []scheduler.LoopInfo `json:"loops"`
			}
			if err := c.do(cmd.Context(), "GET", "/loops", nil, &resp); err != nil {
				return err
			}
			if c.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "LOOP\tSCHEDULE\tAGENT\tRUN AS\tNEXT (UTC)\tLAST (UTC)")
			for _, l := range resp.Loops {
				last := "-"
				if l.Last != nil {
					last = fmt.Sprintf("%s %s", l.Last.Status, l.Last.ScheduledAt.UTC().Format(time.DateTime))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.Name, l.Schedule, l.Agent, l.RunAs, l.Next.UTC().Format(time.DateTime), last)
			}
			if len(resp.Loops) == 0 {
				fmt.Fprintln(tw, "(no loops you may read)")
			}
			return tw.Flush()
		},
	}
}

func (c *loopClient) historyCmd() *cobra.Command {
	var limit int
	var before string
	cmd := &cobra.Command{
		Use:   "history <loop>",
		Short: "Show a loop's firings, newest first: status, duration, errors, decision ids",
		Long: `History shows a loop's firings, newest first. Each firing is keyed by (loop, scheduled time) and
runs at most once to completion; "attempts" above 1 means a scheduler died mid-run and another (or
its restart) ran it again. decision_id is the agent/invoke decision of the run: lushctl audit query
--id <decision_id> shows it, and the tool calls it made.`,
		Example: "  lushctl loop history hourly-notes\n  lushctl loop history hourly-notes --limit 100 -o json",
		Args:    args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if limit < 1 || limit > 1000 {
				return usage("--limit must be from 1 to 1000")
			}
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			if before != "" {
				if _, err := time.Parse(time.RFC3339Nano, before); err != nil {
					return usage("--before %q: give an RFC 3339 time such as 2026-11-23T09:00:00Z", before)
				}
				q.Set("before", before)
			}
			var resp struct {
				Loop       string             `json:"loop"`
				DecisionID string             `json:"decision_id"`
				Firings    []scheduler.Firing `json:"firings"`
			}
			if err := c.do(cmd.Context(), "GET", "/loops/"+url.PathEscape(a[0])+"/history?"+q.Encode(), nil, &resp); err != nil {
				return err
			}
			if c.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCHEDULED (UTC)\tTRIGGER\tSTATUS\tATTEMPTS\tDURATION\tDECISION\tERROR")
			for _, f := range resp.Firings {
				dur := "-"
				if d := f.Duration(); d > 0 {
					dur = d.Round(time.Millisecond).String()
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", f.ScheduledAt.UTC().Format(firingTime), f.Trigger,
					f.Status, f.Attempts, dur, orDash(f.DecisionID), oneLine(f.Error, 80))
			}
			if len(resp.Firings) == 0 {
				fmt.Fprintln(tw, "(no firings yet)")
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "how many firings to show")
	cmd.Flags().StringVar(&before, "before", "", "only firings scheduled before this time (RFC 3339), for paging")
	return cmd
}

func (c *loopClient) triggerCmd() *cobra.Command {
	var instruction string
	var detach bool
	cmd := &cobra.Command{
		Use:   "trigger <loop>",
		Short: "Fire a loop now and wait for its result",
		Long: `Trigger fires a loop now, as its run_as service account, with the loop's instruction or the one
given with --instruction. The firing is recorded in the loop's history like a scheduled one (trigger
"manual", with who triggered it) and obeys the loop's concurrency and overlap policy: with overlap
skip, a trigger while the loop runs is recorded as skipped.

Trigger waits for the firing to end and prints its result; --detach returns as soon as it is
recorded. Exit code 1 when the firing did not succeed.`,
		Example: `  lushctl loop trigger hourly-notes
  lushctl loop trigger hourly-notes --instruction "Only look at notes tagged urgent"
  lushctl loop trigger weekday-digest --detach -o json`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			body, _ := json.Marshal(scheduler.TriggerRequest{Instruction: instruction, Wait: !detach})
			var resp struct {
				DecisionID string           `json:"decision_id"`
				Firing     scheduler.Firing `json:"firing"`
			}
			ctx := cmd.Context()
			if !detach {
				ctx = onProcessing(ctx, func() { fmt.Fprintf(cmd.ErrOrStderr(), "triggered %s; waiting for it to finish...\n", a[0]) })
			}
			if err := c.do(ctx, "POST", "/loops/"+url.PathEscape(a[0])+"/trigger", body, &resp); err != nil {
				return err
			}
			f := resp.Firing
			if c.output == "json" {
				if err := writeJSON(cmd.OutOrStdout(), resp); err != nil {
					return err
				}
			} else {
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "loop %s fired at %s UTC: %s", f.Loop, f.ScheduledAt.UTC().Format(firingTime), f.Status)
				if d := f.Duration(); d > 0 {
					fmt.Fprintf(w, " in %s", d.Round(time.Millisecond))
				}
				fmt.Fprintln(w)
				if f.DecisionID != "" {
					fmt.Fprintf(w, "invocation: %s\n", f.DecisionID)
				}
				if f.Error != "" {
					fmt.Fprintf(w, "error: %s\n", f.Error)
				}
				if f.Response != "" {
					fmt.Fprintf(w, "\n%s\n", f.Response)
				}
			}
			if !detach && f.Status != scheduler.StatusSucceeded {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&instruction, "instruction", "", "use this instruction instead of the loop's")
	cmd.Flags().BoolVar(&detach, "detach", false, "return once the firing is recorded, without waiting for it")
	return cmd
}

// onProcessing returns ctx with a client trace that calls accepted once, when the server's
// interim answer 102 Processing says it accepted a request whose final answer will take a while
// (a trigger that waits for its firing). A server behind a proxy that drops interim answers
// never calls it.
func onProcessing(ctx context.Context, accepted func()) context.Context {
	var once sync.Once
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
		if code == http.StatusProcessing {
			once.Do(accepted)
		}
		return nil
	}})
}

// oneLine shortens s to one line of at most n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return orDash(s)
}
