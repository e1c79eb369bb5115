package authz

import (
	"fmt"
	"io"
	"strings"
)

// WriteExplanation writes a decision as `lushctl policy eval` prints it and the audit API's
// playground shows it: the headline, who asked what, the class of the tool, the revision, the
// reasons for a denial, why an approval is needed, and the rules that decided.
func WriteExplanation(w io.Writer, in Input, d Decision) {
	headline := map[string]string{
		OutcomeAllow:    "ALLOW",
		OutcomeStub:     "STUB (allowed; the write is not executed because live writes are off)",
		OutcomeApproval: "APPROVAL REQUIRED (allowed once a person approves)",
		OutcomeDeny:     "DENY",
		OutcomeError:    "DENY (evaluation failed: the policy could not be evaluated)",
	}[d.Outcome]
	fmt.Fprintf(w, "decision: %s\n", headline)
	who := in.Principal.ID
	if len(in.Principal.Groups) > 0 {
		who += " (groups: " + strings.Join(in.Principal.Groups, ", ") + ")"
	}
	fmt.Fprintf(w, "  principal  %s\n", who)
	if in.Agent != "" {
		agent := in.Agent
		if len(in.Chain) > 1 {
			agent += " (chain: " + strings.Join(in.Chain, " → ") + ")"
		}
		fmt.Fprintf(w, "  agent      %s\n", agent)
	}
	action := in.Action
	if in.Tool != nil {
		action += " " + in.Tool.Ref
		if in.Tool.Name != "" {
			action += " " + in.Tool.Name
		}
		fmt.Fprintf(w, "  action     %s\n", action)
		if d.Outcome != OutcomeError { // a failed evaluation classified nothing
			fmt.Fprintf(w, "  class      access %s, risk %s\n", d.Access, d.Risk)
		}
	} else {
		if in.Loop != "" {
			action += " " + in.Loop
		}
		fmt.Fprintf(w, "  action     %s\n", action)
	}
	fmt.Fprintf(w, "  revision   %s\n", short(d.Revision))
	if len(d.Reasons) > 0 {
		fmt.Fprintln(w, "reasons:")
		for _, r := range d.Reasons {
			fmt.Fprintf(w, "  ✗ %s: %s\n", r.Rule, r.Message)
		}
	}
	if len(d.Approvals) > 0 {
		fmt.Fprintln(w, "approval needed because:")
		for _, r := range d.Approvals {
			fmt.Fprintf(w, "  ? %s: %s\n", r.Rule, r.Message)
		}
	}
	if d.Error != "" {
		fmt.Fprintf(w, "error: %s\n", d.Error)
	}
	fmt.Fprintf(w, "rules: %s\n", strings.Join(d.Rules, ", "))
}

// FilterTrace keeps the trace (Engine.Explain) as mode asks: "notes" keeps only the events of
// trace(...) notes; anything else keeps it whole.
func FilterTrace(trace, mode string) string {
	if mode != "notes" {
		return trace
	}
	var out []string
	for _, line := range strings.Split(trace, "\n") {
		if strings.Contains(line, "Note") {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return "(no trace(...) notes; use --explain full)\n"
	}
	return strings.Join(out, "\n") + "\n"
}
