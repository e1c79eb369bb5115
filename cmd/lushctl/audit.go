package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// defaultDecisionLog is where the gateway writes its decision log, relative to the project.
const defaultDecisionLog = ".lush/decisions.db"

// tailPoll is how often `audit tail --follow` looks for new events.
const tailPoll = 250 * time.Millisecond

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read the decision log: every decision Lush made and what happened after it",
		Long: `Every decision an enforcement point makes (allow, deny, stub, approval_required, error) is one
event in the decision log, committed before the call goes on; what happened afterwards (the
upstream's status and latency) is appended as its completion. The log is a SQLite database,
.lush/decisions.db by default (--log, or $LUSH_DECISION_LOG); it can be read while the gateway
writes it.`,
	}
	cmd.AddCommand(newAuditQueryCmd(), newAuditTailCmd(), newAuditReplayCmd(), newAuditReportCmd(), newAuditExportCmd(),
		newAuditVerifyCmd(), newAuditRetainCmd())
	return cmd
}

type auditFlags struct {
	log, output                           string
	principal, agent, tool, toolName      string
	outcome, action, revision, decisionID string
	since, until                          string
	access, group, text                   string
	limit                                 int
	before                                int64
	oldest, follow, writes                bool
	csv                                   bool // the command writes CSV (query)
}

// liveWrite is the --outcome for allowed writes that ran (not stubbed).
const liveWrite = decisionlog.OutcomeLiveWrite

func (f *auditFlags) register(cmd *cobra.Command, limit int, limitHelp string) {
	fl := cmd.Flags()
	fl.StringVar(&f.log, "log", "", "decision log file (default $LUSH_DECISION_LOG, else "+defaultDecisionLog+")")
	fl.StringVar(&f.principal, "principal", "", "only decisions about this principal (user:alice, serviceaccount:bot)")
	fl.StringVar(&f.agent, "agent", "", "only decisions about this agent")
	fl.StringVar(&f.tool, "tool", "", "only decisions about this tool reference (mcp://…, tools/…)")
	fl.StringVar(&f.toolName, "tool-name", "", "only decisions about this MCP tool name")
	fl.StringVar(&f.outcome, "outcome", "", "only this outcome: "+strings.Join(authz.Outcomes, "|"))
	fl.StringVar(&f.action, "action", "", "only this action (tools/call, tools/list, loop/trigger, …)")
	fl.StringVar(&f.revision, "revision", "", "only decisions by this policy revision (a build hash or its prefix)")
	fl.StringVar(&f.decisionID, "decision-id", "", "only this decision (its id or a prefix, as printed)")
	fl.StringVar(&f.since, "since", "", "only decisions at or after this time: a duration ago (90s, 1h, 7d) or RFC 3339")
	fl.StringVar(&f.until, "until", "", "only decisions before this time: a duration ago or RFC 3339")
	fl.StringVar(&f.access, "access", "", "only decisions about calls needing this access: read or write")
	fl.StringVar(&f.group, "group", "", "only decisions about this principal, or any member of this group (group:eng)")
	fl.StringVar(&f.text, "text", "", "only decisions whose logged arguments contain this text")
	fl.IntVarP(&f.limit, "limit", "n", limit, limitHelp)
	outputFlag(cmd, &f.output)
}

// logPath resolves the decision log: --log, $LUSH_DECISION_LOG, then the default.
func (f *auditFlags) logPath() string {
	if f.log != "" {
		return f.log
	}
	if env := os.Getenv("LUSH_DECISION_LOG"); env != "" {
		return env
	}
	return defaultDecisionLog
}

// filter checks the flags and turns them into a query.
func (f *auditFlags) filter(now time.Time) (decisionlog.Filter, error) {
	if !f.csv || f.output != "csv" {
		if err := checkOutput(f.output); err != nil {
			return decisionlog.Filter{}, err
		}
	}
	sel := decisionlog.Filter{Access: f.access}
	switch sel.SetOutcome(f.outcome) {
	case nil:
	case decisionlog.ErrLiveWriteIsWrite:
		return decisionlog.Filter{}, usage("--outcome %s is a write: it cannot be combined with --access read", liveWrite)
	default:
		return decisionlog.Filter{}, usage("--outcome must be one of %s or %s, not %q", strings.Join(authz.Outcomes, ", "), liveWrite, f.outcome)
	}
	outcome, access := sel.Outcome, sel.Access
	if access != "" && access != "read" && access != "write" {
		return decisionlog.Filter{}, usage("--access must be read or write, not %q", access)
	}
	if f.group != "" && !strings.HasPrefix(f.group, "group:") && !strings.Contains(f.group, ":") {
		return decisionlog.Filter{}, usage("--group must be a group (group:<name>) or a principal, not %q", f.group)
	}
	action := f.action
	if f.writes {
		if action != "" && action != "tools/call" {
			return decisionlog.Filter{}, usage("--writes is the trail of tools/call writes: it cannot be combined with --action %s", action)
		}
		action, access = "tools/call", "write"
	}
	if f.limit < 1 || f.limit > decisionlog.MaxLimit {
		return decisionlog.Filter{}, usage("--limit must be between 1 and %d, not %d", decisionlog.MaxLimit, f.limit)
	}
	since, err := parseWhen("--since", f.since, now)
	if err != nil {
		return decisionlog.Filter{}, err
	}
	until, err := parseWhen("--until", f.until, now)
	if err != nil {
		return decisionlog.Filter{}, err
	}
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return decisionlog.Filter{}, usage("--since (%s) must be before --until (%s)", since.Format(time.RFC3339), until.Format(time.RFC3339))
	}
	return decisionlog.Filter{Since: since, Until: until, Principal: f.principal, Agent: f.agent, Tool: f.tool, ToolName: f.toolName,
		Outcome: outcome, Action: action, Revision: f.revision, DecisionID: f.decisionID, Limit: f.limit, Oldest: f.oldest,
		Access: access, Group: f.group, Text: f.text, BeforeSeq: f.before}, nil
}

// parseWhen reads a time flag (decisionlog.ParseTime): a duration before now (1h, 30m, 7d) or an
// RFC 3339 time.
func parseWhen(flag, v string, now time.Time) (time.Time, error) {
	t, err := decisionlog.ParseTime(v, now)
	switch {
	case err == decisionlog.ErrNotPositive:
		return t, usage("%s must be a positive duration, not %q", flag, v)
	case err == decisionlog.ErrTimeOutOfRange:
		return t, usage("%s %q is out of range (years 1678 to 2262)", flag, v)
	case err != nil:
		return t, usage("%s must be a duration ago (90s, 1h, 7d) or an RFC 3339 time (2026-05-01T12:00:00Z), not %q", flag, v)
	}
	return t, nil
}

// openLog opens the decision log for reading; a missing file says where it looked.
// open checks the filters and opens the decision log they apply to.
func (f *auditFlags) open() (decisionlog.Filter, *decisionlog.Reader, error) {
	filter, err := f.filter(time.Now())
	if err != nil {
		return filter, nil, err
	}
	r, err := f.openLog()
	return filter, r, err
}

func (f *auditFlags) openLog() (*decisionlog.Reader, error) {
	path := f.logPath()
	r, err := decisionlog.OpenReader(path)
	if errors.Is(err, fs.ErrNotExist) {
		abs, aerr := filepath.Abs(path)
		if aerr != nil {
			abs = path
		}
		return nil, fmt.Errorf("no decision log at %s (the gateway writes one there; choose another with --log or $LUSH_DECISION_LOG)", abs)
	}
	return r, err
}

func newAuditQueryCmd() *cobra.Command {
	var f auditFlags
	cmd := &cobra.Command{
		Use:   "query",
		Short: "Find decisions in the decision log, newest first",
		Long: `Query prints the decisions that match every filter given, newest first (--oldest for the
other way), with their completion when there is one.

Output: a table (-o text), or one JSON object per line (-o json): {"seq", "event",
"completion"}, where event is the full decision-log event (OPA's fields plus Lush's).

Exit codes: 0 success (also when nothing matches), 2 usage error, 3 the log cannot be read
(a missing log file is an error, not an empty result).`,
		Example: `  lushctl audit query --principal user:alice --since 1h
  lushctl audit query --outcome deny --tool mcp://npx/@modelcontextprotocol/server-filesystem
  lushctl audit query --decision-id 01a20183-c1a9-7b5e -o json | jq .event.input   # a v7 id: its first 13 characters are its time
  lushctl audit query --log /var/lib/lush/decisions.db --since 2026-05-01T00:00:00Z --until 2026-05-02T00:00:00Z`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, r, err := f.open()
			if err != nil {
				return err
			}
			defer r.Close()
			recs, err := r.Query(cmd.Context(), filter)
			if err != nil {
				return err
			}
			if len(recs) == filter.Limit {
				next := fmt.Sprintf("--before %d", recs[len(recs)-1].Seq)
				if f.oldest {
					next = "(oldest first: --since the last time shown)"
				}
				defer fmt.Fprintf(cmd.ErrOrStderr(), "%d decisions shown; there may be more: %s\n", len(recs), next)
			}
			switch {
			case f.output == "json":
				return writeRecords(cmd.OutOrStdout(), recs)
			case f.output == "csv":
				return writeCSV(cmd.OutOrStdout(), recs, f.writes)
			case len(recs) == 0:
				fmt.Fprintf(cmd.ErrOrStderr(), "no decisions in %s match\n", r.Path())
				return nil
			case f.writes:
				return writeTrail(cmd.OutOrStdout(), recs)
			}
			t := &recordTable{}
			t.add(recs...)
			return t.flush(cmd.OutOrStdout())
		},
	}
	f.register(cmd, decisionlog.DefaultLimit, fmt.Sprintf("at most this many decisions (up to %d)", decisionlog.MaxLimit))
	cmd.Flags().BoolVar(&f.oldest, "oldest", false, "oldest first")
	cmd.Flags().Int64Var(&f.before, "before", 0, "only decisions logged before this seq (page back: the hint printed after a full page)")
	cmd.Flags().BoolVar(&f.writes, "writes", false, "the write audit trail: writes with their arguments, response and environment")
	cmd.Flag("output").Usage = "output format: text, json (one object per line) or csv"
	f.csv = true
	return cmd
}

func newAuditTailCmd() *cobra.Command {
	var f auditFlags
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Print the last decisions, and with --follow new ones as they are logged",
		Long: `Tail prints the last decisions that match the filters (20 by default), oldest first, and with
--follow keeps printing new ones as the gateway logs them (it looks every 250ms) until
interrupted (Ctrl-C).

Output: a table (-o text), or one JSON object per line (-o json), as for audit query.`,
		Example: `  lushctl audit tail
  lushctl audit tail --follow --outcome deny
  lushctl audit tail -f --agent researcher -o json | jq -c '.event | {principal, tool_name, outcome}'`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, r, err := f.open()
			if err != nil {
				return err
			}
			defer r.Close()
			return tail(cmd, r, filter, f.output, f.follow)
		},
	}
	f.register(cmd, 20, "print this many decisions first")
	cmd.Flags().BoolVarP(&f.follow, "follow", "f", false, "keep printing new decisions as they are logged")
	return cmd
}

// tail prints the last filter.Limit matching decisions, then (follow) new ones until the context
// ends. New events are found by seq: every event with a seq at most the newest seen before a
// query was committed before it, so each poll resumes after the newest seq it knew about.
func tail(cmd *cobra.Command, r *decisionlog.Reader, filter decisionlog.Filter, output string, follow bool) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	table := &recordTable{}
	emit := func(recs []decisionlog.Record) error {
		if output == "json" {
			return writeRecords(out, recs)
		}
		table.add(recs...)
		return table.flush(out)
	}
	newest := func() (int64, error) {
		recs, err := r.Query(ctx, decisionlog.Filter{Limit: 1})
		if err != nil || len(recs) == 0 {
			return 0, err
		}
		return recs[0].Seq, nil
	}
	head, err := newest()
	if err != nil {
		return err
	}
	filter.Oldest = false
	recs, err := r.Query(ctx, filter)
	if err != nil {
		return err
	}
	slices.Reverse(recs)
	if len(recs) == 0 && output == "text" {
		if !follow {
			fmt.Fprintf(cmd.ErrOrStderr(), "no decisions in %s match\n", r.Path())
			return nil
		}
		if err := table.flush(out); err != nil { // the header, so that the user sees it is running
			return err
		}
	}
	if err := emit(recs); err != nil {
		return err
	}
	if !follow {
		return nil
	}
	last := head
	if n := len(recs); n > 0 {
		last = max(last, recs[n-1].Seq)
	}
	next := filter
	next.Oldest, next.Limit = true, decisionlog.MaxLimit
	ticker := time.NewTicker(tailPoll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		for {
			head, err := newest()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			next.AfterSeq = last
			recs, err := r.Query(ctx, next)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if err := emit(recs); err != nil {
				return err
			}
			if len(recs) == next.Limit { // more are waiting: read on without pausing
				last = recs[len(recs)-1].Seq
				continue
			}
			last = max(last, head)
			if n := len(recs); n > 0 {
				last = max(last, recs[n-1].Seq)
			}
			break
		}
	}
}

// writeRecords prints one JSON object per line.
func writeRecords(w io.Writer, recs []decisionlog.Record) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// recordTable prints decisions as aligned columns. Column widths only grow, so rows printed
// later by tail --follow line up with earlier ones unless a value is wider than any before.
type recordTable struct {
	widths  []int
	rows    [][]string
	printed bool
}

var recordColumns = []string{"TIME", "POINT", "OUTCOME", "RESULT", "PRINCIPAL", "AGENT", "TOOL", "DECISION ID", "RULES"}

func (t *recordTable) add(recs ...decisionlog.Record) {
	for _, r := range recs {
		e := r.Event
		tool := e.Tool
		if e.ToolName != "" {
			tool += " (" + e.ToolName + ")"
		}
		result := "-"
		if r.Completion != nil {
			result = r.Completion.Status
		}
		t.rows = append(t.rows, []string{
			e.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z"),
			dash(e.Point),
			e.Outcome,
			result,
			dash(e.Principal),
			dash(e.Agent),
			dash(tool),
			e.DecisionID,
			dash(strings.Join(e.Rules, ",")),
		})
	}
}

// flush prints the header (the first time) and the rows added since the last flush.
func (t *recordTable) flush(w io.Writer) error {
	rows := t.rows
	if !t.printed {
		rows = append([][]string{recordColumns}, rows...)
	}
	if t.widths == nil {
		t.widths = make([]int, len(recordColumns))
	}
	for _, row := range rows {
		for i, cell := range row {
			t.widths[i] = max(t.widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		for i, cell := range row {
			b.WriteString(cell)
			if i < len(row)-1 {
				b.WriteString(strings.Repeat(" ", t.widths[i]-utf8.RuneCountInString(cell)+2))
			}
		}
		b.WriteByte('\n')
	}
	t.rows, t.printed = nil, true
	_, err := io.WriteString(w, b.String())
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
