// Package report summarises a decision log over a period: per tool, the calls, their outcomes,
// error rate, upstream latency (p50, p95) and read/write mix; per agent, invocations and model
// tokens; per principal, calls and denied attempts; and, against a build, the tools agents
// declare but never used, the tools used far more than the others, and the grants nobody used.
package report

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/principal"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// Tool is the use of one tool (an MCP server's tool, or a single tool).
type Tool struct {
	Tool    string  `json:"tool"`
	Name    string  `json:"name,omitempty"`
	Calls   int     `json:"calls"` // tools/call decisions
	Allowed int     `json:"allowed"`
	Stubbed int     `json:"stubbed"`
	Denied  int     `json:"denied"` // deny, approval_required, error
	Errors  int     `json:"errors"` // allowed calls whose upstream failed (error, timeout, unavailable, …)
	ErrRate float64 `json:"error_rate"`
	P50MS   float64 `json:"p50_ms"` // upstream latency of the allowed calls that ran
	P95MS   float64 `json:"p95_ms"`
	Reads   int     `json:"reads"`
	Writes  int     `json:"writes"`
	latency []int64
}

// Agent is the use of one agent.
type Agent struct {
	Agent       string `json:"agent"`
	Invocations int    `json:"invocations"` // allowed agent/invoke decisions
	Denied      int    `json:"denied"`
	TokensIn    int64  `json:"tokens_input"`
	TokensOut   int64  `json:"tokens_output"`
}

// Principal is what one principal did.
type Principal struct {
	Principal string `json:"principal"`
	Calls     int    `json:"calls"`
	Denied    int    `json:"denied"`
}

// Report is the summary of a period.
type Report struct {
	Decisions  int         `json:"decisions"`
	Tools      []Tool      `json:"tools"`
	Agents     []Agent     `json:"agents"`
	Principals []Principal `json:"principals"`
	// Against a build (nil without one):
	Unused       []string `json:"unused_tools,omitempty"`   // "agent: tool" allowlisted but never called
	Overused     []string `json:"overused_tools,omitempty"` // tools with more than 3× the mean calls
	UnusedGrants []string `json:"unused_grants,omitempty"`  // "tool: principal access" no allowed call used
}

// Compute reads every event f selects (its Limit is ignored: the log is read page by page) and
// summarises them; with m, it also checks the build's allowlists and grants against them.
func Compute(ctx context.Context, r *decisionlog.Reader, f decisionlog.Filter, m *manifest.Manifest) (*Report, error) {
	rep := &Report{}
	tools := map[[2]string]*Tool{}
	agents := map[string]*Agent{}
	principals := map[string]*Principal{}
	called := map[[2]string]bool{}    // agent, tool ref
	usedGrant := map[[2]string]bool{} // tool ref, principal of the match set
	f.Oldest, f.Limit, f.AfterSeq = true, decisionlog.MaxLimit, 0
	for {
		recs, err := r.Query(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		for _, rec := range recs {
			ev := rec.Event
			rep.Decisions++
			allowed := ev.Outcome == authz.OutcomeAllow || ev.Outcome == authz.OutcomeStub
			switch ev.Action {
			case authz.ActionToolsCall:
				k := [2]string{ev.Tool, ev.ToolName}
				t := tools[k]
				if t == nil {
					t = &Tool{Tool: ev.Tool, Name: ev.ToolName}
					tools[k] = t
				}
				t.Calls++
				switch ev.Outcome {
				case authz.OutcomeAllow:
					t.Allowed++
				case authz.OutcomeStub:
					t.Stubbed++
				default:
					t.Denied++
				}
				if ev.Access == "write" {
					t.Writes++
				} else {
					t.Reads++
				}
				if c := rec.Completion; c != nil && ev.Outcome == authz.OutcomeAllow {
					if c.Status != decisionlog.StatusOK && c.Status != decisionlog.StatusStubbed {
						t.Errors++
					}
					t.latency = append(t.latency, c.LatencyNS)
				}
				p := principals[ev.Principal]
				if p == nil {
					p = &Principal{Principal: ev.Principal}
					principals[ev.Principal] = p
				}
				p.Calls++
				if !allowed {
					p.Denied++
				}
				if allowed {
					called[[2]string{ev.Agent, ev.Tool}] = true
					for _, who := range append([]string{ev.Principal, principal.Everyone}, ev.Groups...) {
						usedGrant[[2]string{ev.Tool, who}] = true
					}
				}
			case authz.ActionAgentInvoke:
				a := agents[ev.Agent]
				if a == nil {
					a = &Agent{Agent: ev.Agent}
					agents[ev.Agent] = a
				}
				if allowed {
					a.Invocations++
				} else {
					a.Denied++
				}
				if c := rec.Completion; c != nil {
					a.TokensIn += c.TokensInput
					a.TokensOut += c.TokensOutput
				}
			}
		}
		if len(recs) < decisionlog.MaxLimit {
			break
		}
		f.AfterSeq = recs[len(recs)-1].Seq
	}
	for _, t := range tools {
		if ran := t.Allowed; ran > 0 {
			t.ErrRate = float64(t.Errors) / float64(ran)
		}
		slices.Sort(t.latency)
		t.P50MS, t.P95MS = quantile(t.latency, 0.50), quantile(t.latency, 0.95)
		rep.Tools = append(rep.Tools, *t)
	}
	slices.SortFunc(rep.Tools, func(a, b Tool) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), cmp.Compare(a.Tool, b.Tool), cmp.Compare(a.Name, b.Name))
	})
	for _, a := range agents {
		rep.Agents = append(rep.Agents, *a)
	}
	slices.SortFunc(rep.Agents, func(a, b Agent) int {
		return cmp.Or(cmp.Compare(b.Invocations, a.Invocations), cmp.Compare(a.Agent, b.Agent))
	})
	for _, p := range principals {
		rep.Principals = append(rep.Principals, *p)
	}
	slices.SortFunc(rep.Principals, func(a, b Principal) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), cmp.Compare(a.Principal, b.Principal))
	})
	if m != nil {
		rep.againstBuild(m, called, usedGrant)
	}
	return rep, nil
}

// againstBuild lists the allowlisted tools never called, the over-used tools and the unused
// grants.
func (rep *Report) againstBuild(m *manifest.Manifest, called, usedGrant map[[2]string]bool) {
	for _, a := range m.Agents {
		for _, t := range a.Tools {
			if !called[[2]string{a.Name, t.Ref}] {
				rep.Unused = append(rep.Unused, a.Name+": "+t.Ref)
			}
		}
	}
	perRef := map[string]int{}
	for _, t := range rep.Tools {
		perRef[t.Tool] += t.Calls
	}
	if len(perRef) > 1 {
		total := 0
		for _, n := range perRef {
			total += n
		}
		mean := float64(total) / float64(len(perRef))
		for ref, n := range perRef {
			if float64(n) > 3*mean {
				rep.Overused = append(rep.Overused, fmt.Sprintf("%s: %d calls (mean %.0f)", ref, n, mean))
			}
		}
		slices.Sort(rep.Overused)
	}
	for _, g := range m.Grants {
		if !usedGrant[[2]string{g.Tool, g.Principal}] {
			rep.UnusedGrants = append(rep.UnusedGrants, fmt.Sprintf("%s: %s %s", g.Tool, g.Principal, g.Access))
		}
	}
	slices.Sort(rep.Unused)
	slices.Sort(rep.UnusedGrants)
	rep.UnusedGrants = slices.Compact(rep.UnusedGrants)
}

func quantile(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(len(sorted)-1, int(q*float64(len(sorted))))
	return float64(sorted[i]) / 1e6
}
