// Package review computes an access review of a build: for every principal and group the build
// names, what they can do through each agent (agent × tool × access), decided by the build's own
// compiled policy rather than by a second implementation of it, with the grants and ACL entries
// that give it. Diff compares two builds: what a change grants and what it revokes.
package review

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/principal"
	"github.com/lush-agents/lush/internal/toolref"
	"github.com/lush-agents/lush/policies/authz"
)

// AnyOtherTool stands for the tools of an MCP server that the build does not name (they take the
// server's default class).
const AnyOtherTool = "*"

// Row is one thing a subject can do: call Tool (Name, for an MCP server) through Agent, or, for
// a project role, an Action of its own (audit/read: read the decision log; approval/read and
// approval/decide: list and decide the calls that wait for a person; budget/read and
// budget/top-up: read and top up budgets; tasks/read and tasks/cancel, through Agent: read and
// cancel the tasks other principals created there).
type Row struct {
	Subject   string   `json:"subject"`          // user:, group: or serviceaccount:
	Action    string   `json:"action,omitempty"` // a project role's action; empty for tool rows
	Agent     string   `json:"agent"`
	Tool      string   `json:"tool"`
	Name      string   `json:"name,omitempty"`
	Access    string   `json:"access"`  // read or write
	Outcome   string   `json:"outcome"` // allow, stub (a write, stubbed unless live writes are on), approval_required, conditional
	Risk      string   `json:"risk"`
	GrantedBy []string `json:"granted_by"` // the ACL entries and tool grants that give it
	// Conditions are the project policies' rules that refused the call without arguments: the
	// base library grants it, and those rules decide each call by its arguments (outcome
	// conditional).
	Conditions []string `json:"conditions,omitempty"`
}

// Conditional is the outcome of a row that project policies decide call by call.
const Conditional = "conditional"

// key identifies what a row is about, without how.
func (r Row) key() string {
	return r.Subject + "\x00" + r.Action + "\x00" + r.Agent + "\x00" + r.Tool + "\x00" + r.Name
}

// Review is what every subject can do under a build.
type Review struct {
	Revision string `json:"revision"`
	Rows     []Row  `json:"rows"`
}

// Compute asks the build's policy (eng, loaded from the build's bundle) about every subject,
// agent and tool of m. Each subject is reviewed as itself with no other groups: a user's rights
// through the groups an identity provider gives it are the rows of those groups.
func Compute(ctx context.Context, m *manifest.Manifest, eng *authz.Engine) (*Review, error) {
	rv := &Review{Revision: eng.Revision()}
	for _, subject := range subjects(m) {
		match := []string{subject, principal.Everyone}
		for _, a := range m.Agents {
			in := authz.Input{Action: authz.ActionAgentInvoke, Principal: authz.Principal{ID: subject, Groups: []string{}},
				Agent: a.Name, Chain: []string{a.Name}, Depth: 1}
			if d := eng.Decide(ctx, in); d.Outcome == authz.OutcomeError {
				return nil, fmt.Errorf("review %s at agent %s: %s", subject, a.Name, d.Error)
			} else if !d.Allow {
				continue
			}
			acl := aclEntries(a.ACL, match)
			for _, t := range a.Tools {
				for _, name := range toolNames(m, a, t.Ref) {
					in.Action, in.Tool = authz.ActionToolsCall, &authz.Tool{Ref: t.Ref, Name: name}
					d := eng.Decide(ctx, in)
					if d.Outcome == authz.OutcomeError {
						return nil, fmt.Errorf("review %s at agent %s, tool %s %s: %s", subject, a.Name, t.Ref, name, d.Error)
					}
					row := Row{Subject: subject, Agent: a.Name, Tool: t.Ref, Name: name, Access: d.Access,
						Outcome: d.Outcome, Risk: d.Risk, GrantedBy: append(slices.Clone(acl), grants(m, t.Ref, name, match)...)}
					if !d.Allow {
						if row.Conditions = projectRules(d); row.Conditions == nil {
							continue
						}
						row.Outcome = Conditional
					}
					rv.Rows = append(rv.Rows, row)
				}
			}
			// Other principals' tasks at this agent (MCP upstreams' tasks, A2A tasks): the tasks
			// role lets its holders read and cancel them. A subject's own tasks need no row.
			for _, ta := range taskActions {
				in := authz.Input{Action: ta.action, Principal: authz.Principal{ID: subject, Groups: []string{}}, Agent: a.Name,
					Chain: []string{a.Name}, Depth: 1, Task: &authz.Task{ID: "*", Principal: anotherPrincipal, Agent: a.Name}}
				switch d := eng.Decide(ctx, in); {
				case d.Outcome == authz.OutcomeError:
					return nil, fmt.Errorf("review %s at agent %s, %s: %s", subject, a.Name, ta.action, d.Error)
				case d.Allow:
					rv.Rows = append(rv.Rows, Row{Subject: subject, Action: ta.action, Agent: a.Name, Access: ta.access, Outcome: d.Outcome,
						Risk: d.Risk, GrantedBy: append(slices.Clone(acl), roleEntries(m, "tasks", match)...)})
				}
			}
		}
		// Project roles that the policy turns into actions of their own.
		for _, ra := range roleActions {
			in := authz.Input{Action: ra.action, Principal: authz.Principal{ID: subject, Groups: []string{}}}
			switch d := eng.Decide(ctx, in); {
			case d.Outcome == authz.OutcomeError:
				return nil, fmt.Errorf("review %s for %s: %s", subject, in.Action, d.Error)
			case d.Allow:
				var by []string
				for _, role := range ra.roles {
					by = append(by, roleEntries(m, role, match)...)
				}
				rv.Rows = append(rv.Rows, Row{Subject: subject, Action: in.Action, Access: "read", Outcome: d.Outcome, Risk: d.Risk,
					GrantedBy: by})
			}
		}
	}
	return rv, nil
}

// taskActions are the operations on another principal's task that the tasks role gives, and the
// access each is.
var taskActions = []struct{ action, access string }{
	{authz.ActionTasksRead, "read"},
	{authz.ActionTasksCancel, "write"},
}

// anotherPrincipal creates the task a subject's rights over others' tasks are asked about: not a
// principal any subject can be (no such kind), so it is never the subject's own task.
const anotherPrincipal = "system:another-principal"

// roleActions are the actions project roles give (lush.yaml roles:), with the roles that give
// each.
var roleActions = []struct {
	action string
	roles  []string
}{
	{authz.ActionAuditRead, []string{"audit"}},
	{authz.ActionApprovalRead, []string{"approve", "audit"}},
	{authz.ActionApprovalDecide, []string{"approve"}},
	{authz.ActionBudgetRead, []string{"budget", "audit"}},
	{authz.ActionBudgetTopUp, []string{"budget"}},
}

// roleEntries are the lush.yaml roles entries of the match set for role.
func roleEntries(m *manifest.Manifest, role string, match []string) []string {
	var out []string
	for _, p := range m.Roles[role] {
		if slices.Contains(match, p) {
			out = append(out, fmt.Sprintf("role %s %s", role, p))
		}
	}
	return out
}

// projectRules are the rules of a denial when every one is a project policy's (not the base
// library's lush.*): the call is granted, and those rules decide it by its arguments. Nil
// otherwise.
func projectRules(d authz.Decision) []string {
	var out []string
	for _, r := range d.Reasons {
		if strings.HasPrefix(r.Rule, "lush.") {
			return nil
		}
		if !slices.Contains(out, r.Rule) {
			out = append(out, r.Rule)
		}
	}
	return out
}

// subjects are the principals and groups the build names, except group:everyone (whose rights
// every subject's rows include).
func subjects(m *manifest.Manifest) []string {
	set := map[string]bool{}
	for _, a := range m.Agents {
		for _, e := range a.ACL {
			set[e.Principal] = true
		}
	}
	for _, l := range m.Loops {
		set[l.RunAs] = true
		for _, e := range l.ACL {
			set[e.Principal] = true
		}
	}
	for _, g := range m.Grants {
		set[g.Principal] = true
	}
	for _, c := range m.Credentials {
		set[c.Principal] = true
	}
	for _, sa := range m.ServiceAccounts {
		set["serviceaccount:"+sa.Name] = true
	}
	for _, ps := range m.Roles {
		for _, p := range ps {
			set[p] = true
		}
	}
	delete(set, principal.Everyone)
	delete(set, "")
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// toolNames are the names a review asks about for ref: "" for single tools; for an MCP server,
// every name the build classes, narrows to or grants, and AnyOtherTool.
func toolNames(m *manifest.Manifest, a manifest.Agent, ref string) []string {
	if r, err := toolref.Parse(ref); err != nil || r.SingleTool() {
		return []string{""}
	}
	set := map[string]bool{AnyOtherTool: true}
	if t, ok := m.Tool(ref); ok {
		for name := range t.Classes {
			if name != "" && name != "*" {
				set[name] = true
			}
		}
	}
	for _, at := range a.Tools {
		if at.Ref == ref {
			for _, n := range at.Only {
				set[n] = true
			}
		}
	}
	for _, g := range m.Grants {
		if g.Tool == ref {
			for _, n := range g.Only {
				set[n] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func aclEntries(acl []manifest.ACLEntry, match []string) []string {
	var out []string
	for _, e := range acl {
		if slices.Contains(match, e.Principal) {
			out = append(out, fmt.Sprintf("acl %s %s", e.Principal, e.Role))
		}
	}
	return out
}

// grants are the tool grants of the match set that cover the tool name.
func grants(m *manifest.Manifest, ref, name string, match []string) []string {
	var out []string
	for _, g := range m.Grants {
		if g.Tool != ref || !slices.Contains(match, g.Principal) || (len(g.Only) > 0 && !slices.Contains(g.Only, name)) {
			continue
		}
		s := fmt.Sprintf("grant %s %s", g.Principal, g.Access)
		if len(g.Only) > 0 {
			s += " only " + strings.Join(g.Only, ",")
		}
		out = append(out, s)
	}
	return out
}

// Change is a row a new build grants, revokes or changes.
type Change struct {
	Change string `json:"change"` // granted, revoked, changed
	Old    *Row   `json:"old,omitempty"`
	New    *Row   `json:"new,omitempty"`
}

// Diff lists what new grants, revokes and changes (access or outcome) compared with old.
func Diff(old, new *Review) []Change {
	before := map[string]Row{}
	for _, r := range old.Rows {
		before[r.key()] = r
	}
	after := map[string]Row{}
	var out []Change
	for _, r := range new.Rows {
		after[r.key()] = r
		o, ok := before[r.key()]
		switch {
		case !ok:
			out = append(out, Change{Change: "granted", New: &r})
		case o.Access != r.Access || o.Outcome != r.Outcome:
			out = append(out, Change{Change: "changed", Old: &o, New: &r})
		}
	}
	for _, r := range old.Rows {
		if _, ok := after[r.key()]; !ok {
			out = append(out, Change{Change: "revoked", Old: &r})
		}
	}
	slices.SortFunc(out, func(a, b Change) int {
		ra, rb := a.New, b.New
		if ra == nil {
			ra = a.Old
		}
		if rb == nil {
			rb = b.Old
		}
		return cmp.Or(strings.Compare(ra.key(), rb.key()), strings.Compare(a.Change, b.Change))
	})
	return out
}
