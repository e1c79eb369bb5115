package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// trailRow is a decision in the write audit trail (seed 000): when, which agent, for whom, which
// tool, with what arguments, what came back, in which environment.
func trailRow(r decisionlog.Record) []string {
	e := r.Event
	tool := e.Tool
	if e.ToolName != "" {
		tool += " (" + e.ToolName + ")"
	}
	var in struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	json.Unmarshal(e.Input, &in)
	args := string(in.Arguments)
	if args == "" {
		args = "(not logged)"
	}
	ran, response := e.Outcome, "-"
	if e.Outcome == authz.OutcomeAllow {
		ran = "live"
	}
	if c := r.Completion; c != nil {
		ran += "/" + c.Status
		if len(c.Response) > 0 {
			response = string(c.Response)
		}
	}
	return []string{e.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z"), e.Agent, e.Principal, tool, ran, args, response, e.Environment, e.DecisionID}
}

var trailColumns = []string{"TIME", "AGENT", "PRINCIPAL", "TOOL", "RAN", "ARGUMENTS", "RESPONSE", "ENVIRONMENT", "DECISION ID"}

// writeTrail prints the write audit trail as a table; arguments and responses are cut to stay
// readable (-o json or csv has them whole).
func writeTrail(w io.Writer, recs []decisionlog.Record) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(trailColumns, "\t"))
	for _, r := range recs {
		row := trailRow(r)
		for _, i := range []int{5, 6} {
			if len(row[i]) > 60 {
				row[i] = row[i][:60] + "…"
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// writeCSV writes decisions (or, with writes, the write audit trail) as CSV with a header row.
func writeCSV(w io.Writer, recs []decisionlog.Record, writes bool) error {
	cw := csv.NewWriter(w)
	if writes {
		cw.Write(trailColumns)
		for _, r := range recs {
			cw.Write(trailRow(r))
		}
	} else {
		cw.Write([]string{"seq", "time", "decision_id", "point", "principal", "groups", "agent", "action", "tool", "tool_name", "access",
			"outcome", "rules", "revision", "result", "environment"})
		for _, r := range recs {
			e := r.Event
			result := ""
			if r.Completion != nil {
				result = r.Completion.Status
			}
			cw.Write([]string{fmt.Sprint(r.Seq), e.Timestamp.UTC().Format("2006-01-02T15:04:05.000000Z"), e.DecisionID, e.Point, e.Principal,
				strings.Join(e.Groups, " "), e.Agent, e.Action, e.Tool, e.ToolName, e.Access, e.Outcome, strings.Join(e.Rules, " "),
				e.Revision, result, e.Environment})
		}
	}
	cw.Flush()
	return cw.Error()
}
