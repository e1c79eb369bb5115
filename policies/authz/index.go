package authz

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/open-policy-agent/opa/v1/bundle"
)

// Index computes data.lush.index, the lookups the decision's fast path (fast_read in
// decision.rego) reads instead of evaluating the agent, capability, privilege and class rules
// over data.lush.project. project is data.lush.project in its JSON form (as decoded by
// encoding/json or OPA's bundle reader). The compiler writes Index's result into every bundle;
// the Engine refuses a bundle whose index is not Index of its project.
//
//	execute[agent]                       {principal: true} holding execute on the agent
//	read[agent][ref]                     {"names": {name: entry}, "other": entry}
//	entry                                {"risk": r, "principals": {principal: true}} or {}
//
// An entry for a tools/call of ref with that MCP tool name ("other" for every name not in
// names) lists the principals and groups whose grant admits the name at read or write, when the
// agent's allowlist admits it at read or write and its class reads at a risk that needs no
// approval (risk r). Whatever the project data holds, the index claims no more than those rules
// allow: a value of an unexpected shape admits nothing, and the full evaluation decides.
func Index(project any) map[string]any {
	p, _ := project.(map[string]any)
	execute := map[string]any{}
	read := map[string]any{}
	agents, _ := p["agents"].(map[string]any)
	settings, _ := p["settings"].(map[string]any)
	risks, ok := settings["approval_risks"].([]any)
	if !ok {
		risks = []any{"destructive"}
	}
	classes, _ := p["classes"].(map[string]any)
	grants, _ := p["grants"].(map[string]any)
	for _, a := range sortedKeys(agents) {
		agent, _ := agents[a].(map[string]any)
		if a == "" || agent == nil {
			continue
		}
		acl, _ := agent["acl"].(map[string]any)
		if ex, ok := acl["execute"].(map[string]any); ok {
			holders := map[string]any{}
			for q, v := range ex {
				if v == true {
					holders[q] = true
				}
			}
			if len(holders) > 0 {
				execute[a] = holders
			}
		}
		tools, _ := agent["tools"].(map[string]any)
		refs := map[string]any{}
		for _, ref := range sortedKeys(tools) {
			if ix := readIndex(tools[ref], classes[ref], grants[ref], risks); ref != "" && ix != nil {
				refs[ref] = ix
			}
		}
		if len(refs) > 0 {
			read[a] = refs
		}
	}
	return map[string]any{"execute": execute, "read": read}
}

// readIndex is read[agent][ref] for the agent's allowlist entry e, the ref's classes and
// grants; nil when no name is admitted.
func readIndex(e, classes, grants any, risks []any) map[string]any {
	entry, ok := e.(map[string]any)
	if !ok {
		return nil
	}
	if acc, ok := entry["access"]; ok && acc != "read" && acc != "write" {
		return nil
	}
	// The names the agent may call: all (nil) or a list.
	var agentOnly []any
	if only, ok := entry["only"]; ok {
		if agentOnly, ok = only.([]any); !ok {
			return nil
		}
	}
	cls, _ := classes.(map[string]any)
	named, _ := cls["tools"].(map[string]any)
	byPrincipal, _ := grants.(map[string]any)

	// Every name some rule singles out; any other name is decided like all others ("other").
	mentioned := map[string]bool{}
	for n := range named {
		mentioned[n] = true
	}
	addStrings(mentioned, agentOnly)
	for _, gs := range byPrincipal {
		list, _ := gs.([]any)
		for _, g := range list {
			if g, ok := g.(map[string]any); ok {
				only, _ := g["only"].([]any)
				addStrings(mentioned, only)
			}
		}
	}

	// entryFor(name, true) is the entry of a mentioned name; entryFor("", false) that of others.
	entryFor := func(name string, isMentioned bool) map[string]any {
		if agentOnly != nil && (!isMentioned || !slices.Contains(agentOnly, any(name))) {
			return map[string]any{}
		}
		var class map[string]any
		if isMentioned {
			class, _ = named[name].(map[string]any)
		}
		if class == nil {
			class, _ = cls["default"].(map[string]any)
		}
		risk, _ := class["risk"].(string)
		if class["access"] != "read" || !slices.Contains([]string{"read", "write", "network", "destructive"}, risk) ||
			slices.Contains(risks, any(risk)) {
			return map[string]any{}
		}
		principals := map[string]any{}
		for q, gs := range byPrincipal {
			list, _ := gs.([]any)
			for _, g := range list {
				if grantAdmits(g, name, isMentioned) {
					principals[q] = true
					break
				}
			}
		}
		if len(principals) == 0 {
			return map[string]any{}
		}
		return map[string]any{"risk": risk, "principals": principals}
	}
	other := entryFor("", false)
	names := map[string]any{}
	for n := range mentioned {
		if e := entryFor(n, true); !sameJSON(e, other) {
			names[n] = e
		}
	}
	if len(other) == 0 && len(names) == 0 {
		return nil
	}
	return map[string]any{"names": names, "other": other}
}

// grantAdmits: g is a grant object whose only (when present, an array) holds name and whose
// access (read by default) is read or write. Names not mentioned are in no only list.
func grantAdmits(g any, name string, isMentioned bool) bool {
	grant, ok := g.(map[string]any)
	if !ok {
		return false
	}
	if only, ok := grant["only"]; ok {
		list, ok := only.([]any)
		if !ok || !isMentioned || !slices.Contains(list, any(name)) {
			return false
		}
	}
	acc, ok := grant["access"]
	return !ok || acc == "read" || acc == "write"
}

func addStrings(set map[string]bool, list []any) {
	for _, v := range list {
		if s, ok := v.(string); ok {
			set[s] = true
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// checkIndex refuses a bundle whose data.lush.index is not Index of its data.lush.project: a
// stale or edited index could let the fast path allow what the rules deny. A bundle without an
// index is accepted (the fast path then never applies).
func checkIndex(data map[string]any) error {
	lush, _ := data["lush"].(map[string]any)
	got, ok := lush["index"]
	if !ok {
		return nil
	}
	var project any
	if err := roundTrip(lush["project"], &project); err != nil {
		return fmt.Errorf("data.lush.project: %w", err)
	}
	var have, want any
	if err := roundTrip(got, &have); err != nil {
		return fmt.Errorf("data.lush.index: %w", err)
	}
	if err := roundTrip(Index(project), &want); err != nil {
		return err
	}
	if !sameJSON(have, want) {
		return fmt.Errorf("data.lush.index does not match data.lush.project (a stale or edited index): rebuild the bundle")
	}
	return nil
}

// roundTrip decodes v's JSON encoding into out, so that values of any Go type (json.Number,
// typed slices) compare as plain JSON.
func roundTrip(v any, out *any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// CheckIndex reports whether b's data.lush.index is the one its project data gives
// (or absent): the check every Engine makes before it evaluates b. The compiler makes it on the
// bundle it built, so that a build never hands out a bundle an Engine would refuse.
func CheckIndex(b *bundle.Bundle) error {
	data := b.Data
	if data == nil {
		data = map[string]any{}
	}
	return checkIndex(data)
}
