package authz

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// MaskQuery is the query that collects the log masks of the project's policies.
const MaskQuery = "data.lush.authz.log_mask"

// Mask returns what the project's policies ask to mask before the input of a decision about in
// is logged: the mask rules of packages lush.policies.<name>, in the form of OPA's
// system.log.mask (remove a value, or replace it), sorted by path. It returns nil, without
// evaluating anything, when no project policy defines mask. Masks are cached like decisions.
func (e *Engine) Mask(ctx context.Context, in Input) ([]MaskOp, error) {
	if e.maskQuery == nil {
		return nil, nil
	}
	var key *[]byte
	var args ast.Value // the arguments, when the key converted them
	if e.maskCache != nil && ctx.Err() == nil {
		key = e.keyBuffer()
		defer e.keys.Put(key)
		k, a, err := appendInputKey((*key)[:0], e.maskDeps, &in)
		args = a
		*key = k
		if err != nil {
			return nil, fmt.Errorf("mask: input: %w", err)
		}
		if ops, ok := e.maskCache.get(k); ok {
			return cloneMasks(ops), nil
		}
	}
	value, err := in.valueWith(args)
	if err != nil {
		return nil, fmt.Errorf("mask: input: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	rs, err := evalInTime(ctx, *e.maskQuery, []rego.EvalOption{rego.EvalParsedInput(value)})
	if err != nil {
		return nil, fmt.Errorf("evaluate %s: %w", MaskQuery, err)
	}
	var ops []MaskOp
	if len(rs) > 0 && len(rs[0].Expressions) > 0 {
		ops = decodeMasks(rs[0].Expressions[0].Value)
	}
	if key != nil {
		e.maskCache.put(*key, cloneMasks(ops))
	}
	return ops, nil
}

// decodeMasks reads the normalized entries of log_mask; anything malformed is skipped (the
// library has dropped it already).
func decodeMasks(v any) []MaskOp {
	var ops []MaskOp
	for _, x := range asSlice(v) {
		m, _ := x.(map[string]any)
		op, _ := m["op"].(string)
		path, _ := m["path"].(string)
		if !strings.HasPrefix(path, "/input/") {
			continue
		}
		switch value, hasValue := m["value"]; {
		case op == "remove":
			ops = append(ops, MaskOp{Op: op, Path: path})
		case op == "upsert" && hasValue:
			ops = append(ops, MaskOp{Op: op, Path: path, Value: value})
		}
	}
	slices.SortFunc(ops, func(a, b MaskOp) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), strings.Compare(a.Op, b.Op))
	})
	return ops
}

// cloneMasks copies ops deeply enough that callers cannot change a cached value.
func cloneMasks(ops []MaskOp) []MaskOp {
	if ops == nil {
		return nil
	}
	out := make([]MaskOp, len(ops))
	for i, op := range ops {
		op.Value = cloneJSON(op.Value)
		out[i] = op
	}
	return out
}

func cloneJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = cloneJSON(x)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, x := range v {
			s[i] = cloneJSON(x)
		}
		return s
	default:
		return v
	}
}
