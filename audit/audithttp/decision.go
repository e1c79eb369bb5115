package audithttp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// ChainReader finds where a decision sits in the log's hash chain: *decisionlog.Log and
// *decisionlog.Reader implement it.
type ChainReader interface {
	ChainPosition(ctx context.Context, decisionID string) (*decisionlog.ChainPosition, error)
}

// DecisionContext is the answer of GET /audit/decisions/{id}/context: what a decision's page
// shows beside the logged record: the rules that decided, described by the build that decided
// (its METADATA and the policy file:line of each), and the decision's place in the hash chain.
type DecisionContext struct {
	DecisionID string `json:"decision_id"`
	Revision   string `json:"revision"`
	// Rules are the decision's rule ids, each once: those that decided (the event's rules), then
	// those of its reasons and approvals not among them.
	Rules []DecidingRule `json:"rules"`
	// RulesNote says why rules lack descriptions and locations: the build that decided is not
	// one this server can read.
	RulesNote string                     `json:"rules_note,omitempty"`
	Chain     *decisionlog.ChainPosition `json:"chain,omitempty"`
}

// DecidingRule is one rule of a decision: what the build says about it, and what it was to the
// decision (Roles: "decided", among the rules that made it; "reason", a denial's reason;
// "approval", why it waits for a person) with its reasons' messages.
type DecidingRule struct {
	authz.RuleInfo
	Roles    []string `json:"roles"`
	Messages []string `json:"messages,omitempty"`
	// Known is false when the build that decided does not name the rule (or cannot be read).
	Known bool `json:"known"`
}

// maxRuleBuilds bounds the builds whose rule catalogs a server keeps.
const maxRuleBuilds = 8

// ruleCatalogs remembers the rule catalogs of the last builds a decision's page asked about.
type ruleCatalogs struct {
	mu    sync.Mutex
	byRev map[string]map[string]authz.RuleInfo
	order []string // oldest first
}

var revisionPattern = regexp.MustCompile(`^[0-9a-f]{8,128}$`)

// rulesOf returns the rule catalog of the build with this revision: the serving policy's when it
// is that build, else the build store's (loaded once, remembered). The note says why there is
// none.
func (s *Server) rulesOf(ctx context.Context, revision string) (map[string]authz.RuleInfo, string) {
	if eng := s.cfg.Decider.Engine(); eng != nil && eng.Revision() == revision {
		return eng.Rules(), ""
	}
	if !revisionPattern.MatchString(revision) {
		return nil, "the decision names no build revision"
	}
	c := &s.catalogs
	c.mu.Lock()
	rules, ok := c.byRev[revision]
	c.mu.Unlock()
	if ok {
		return rules, ""
	}
	if s.cfg.Builds == nil {
		return nil, fmt.Sprintf("build %s is not serving and this server reads no build store", manifest.Short(revision))
	}
	_, bundle, err := s.cfg.Builds.Load(revision)
	if err != nil {
		s.cfg.Logger.Warn("audit API: the build of a decision cannot be read", "revision", revision, "error", err)
		return nil, fmt.Sprintf("build %s is not in this server's build store", manifest.Short(revision))
	}
	eng, err := authz.FromBytes(ctx, bundle, authz.Cache(0))
	if err != nil {
		s.cfg.Logger.Warn("audit API: the bundle of a decision cannot be loaded", "revision", revision, "error", err)
		return nil, fmt.Sprintf("the bundle of build %s cannot be loaded (the server's log has the cause)", manifest.Short(revision))
	}
	rules = eng.Rules()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byRev == nil {
		c.byRev = map[string]map[string]authz.RuleInfo{}
	}
	if _, ok := c.byRev[revision]; !ok {
		if len(c.order) >= maxRuleBuilds {
			delete(c.byRev, c.order[0])
			c.order = c.order[1:]
		}
		c.byRev[revision] = rules
		c.order = append(c.order, revision)
	}
	return rules, ""
}

// decisionContext answers GET /audit/decisions/{id}/context.
func (s *Server) decisionContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if len(id) > maxParamLen {
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("the decision id is longer than %d bytes: use the id as the log shows it", maxParamLen))
		return
	}
	v := s.authorize(w, r, map[string]any{"route": "GET /audit/decisions/{id}/context", "decision_id": id})
	if v == nil {
		return
	}
	start := time.Now()
	rec, err := s.find(r.Context(), id)
	if err != nil {
		s.failed(w, v, start, err)
		return
	}
	if rec == nil {
		v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
		policyhttp.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no decision %q in the log (GET /audit/decisions?decision_id=<prefix> finds one by a prefix of its id)", id))
		return
	}
	out := DecisionContext{DecisionID: id, Revision: rec.Event.Revision, Rules: []DecidingRule{}}
	catalog, note := s.rulesOf(r.Context(), rec.Event.Revision)
	out.RulesNote = note
	index := map[string]int{}
	add := func(rule, role, message string) {
		if rule == "" {
			return
		}
		i, ok := index[rule]
		if !ok {
			info, known := catalog[rule]
			if !known {
				info = authz.RuleInfo{ID: rule}
			}
			i = len(out.Rules)
			index[rule] = i
			out.Rules = append(out.Rules, DecidingRule{RuleInfo: info, Known: known})
		}
		r := &out.Rules[i]
		if !slices.Contains(r.Roles, role) {
			r.Roles = append(r.Roles, role)
		}
		if message != "" {
			r.Messages = append(r.Messages, message)
		}
	}
	for _, rule := range rec.Event.Rules {
		add(rule, "decided", "")
	}
	var result struct {
		Reasons   []authz.Reason `json:"reasons"`
		Approvals []authz.Reason `json:"approvals"`
	}
	_ = json.Unmarshal(rec.Event.Result, &result) // a result of another shape has no reasons to describe
	for _, reason := range result.Reasons {
		add(reason.Rule, "reason", reason.Message)
	}
	for _, reason := range result.Approvals {
		add(reason.Rule, "approval", reason.Message)
	}
	if cr, ok := s.cfg.Log.(ChainReader); ok {
		if out.Chain, err = cr.ChainPosition(r.Context(), id); err != nil {
			s.failed(w, v, start, err)
			return
		}
	}
	v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
	policyhttp.WriteJSON(w, http.StatusOK, out)
}
