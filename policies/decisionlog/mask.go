package decisionlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/lush-agents/lush/policies/authz"
)

// ApplyMask applies the policy's mask operations to e.Input, in order, the way OPA applies
// system.log.mask: "remove" deletes the value at the pointer (an array element is cut out) and
// adds the pointer to e.Erased; "upsert" sets it to the op's value, creating missing object
// members on the way, and adds the pointer to e.Masked. A pointer that names nothing is skipped
// (nothing is there to hide). Paths are JSON pointers (RFC 6901, ~0 and ~1 escapes) rooted at
// the event, so they start with "/input"; "/input" alone removes or replaces the whole input.
//
// Malformed pointers, pointers outside /input (the decision "/result/..." is logged as decided),
// unknown ops, values that are not JSON, and an input that is not valid JSON are reported in the
// returned error, which names the op and its path but never a value. Because such an op may
// have been meant to hide a secret, ApplyMask then fails closed: it removes the input entirely
// (e.Input is null, e.Erased lists "/input", e.Masked is cleared) and the caller logs the event
// anyway. Re-encoding also drops duplicate object keys, so a masked key cannot survive as a
// duplicate.
func ApplyMask(e *Event, ops []authz.MaskOp) error {
	if e == nil {
		return errors.New("mask decision input: event is nil")
	}
	if len(ops) == 0 {
		return nil
	}
	var doc any
	hasDoc := len(bytes.TrimSpace(e.Input)) > 0
	if hasDoc {
		dec := json.NewDecoder(bytes.NewReader(e.Input))
		dec.UseNumber()
		if !json.Valid(e.Input) || dec.Decode(&doc) != nil {
			eraseInput(e)
			return errors.New("mask decision input: input is not valid JSON: removed it")
		}
	}
	var errs []error
	var erased, masked []string
	for i, op := range ops {
		tokens, err := parseMaskPath(op.Path)
		if err != nil {
			errs = append(errs, fmt.Errorf("mask op %d (%s %q): %w", i, op.Op, op.Path, err))
			continue
		}
		switch op.Op {
		case "remove":
			if !hasDoc {
				continue
			}
			if len(tokens) == 0 {
				doc, hasDoc = nil, false
				erased = append(erased, op.Path)
				continue
			}
			var ok bool
			if doc, ok = removeAt(doc, tokens); ok {
				erased = append(erased, op.Path)
			}
		case "upsert":
			value, err := normalize(op.Value)
			if err != nil {
				errs = append(errs, fmt.Errorf("mask op %d (%s %q): value of type %T is not JSON", i, op.Op, op.Path, op.Value))
				continue
			}
			if len(tokens) == 0 {
				doc, hasDoc = value, true
				masked = append(masked, op.Path)
				continue
			}
			if !hasDoc {
				continue
			}
			if upsertAt(doc, tokens, value) {
				masked = append(masked, op.Path)
			}
		default:
			errs = append(errs, fmt.Errorf("mask op %d (%q %q): op must be \"remove\" or \"upsert\"", i, op.Op, op.Path))
		}
	}
	if len(errs) > 0 {
		eraseInput(e)
		return fmt.Errorf("mask decision input: removed the input entirely: %w", errors.Join(errs...))
	}
	if hasDoc {
		out, err := encodeJSON(doc)
		if err != nil { // cannot happen: doc holds only decoded JSON
			eraseInput(e)
			return errors.New("mask decision input: cannot encode the masked input: removed it")
		}
		e.Input = out
	} else {
		e.Input = nil
	}
	e.Erased = append(e.Erased, erased...)
	e.Masked = append(e.Masked, masked...)
	return nil
}

// eraseInput removes the whole input, failing closed towards privacy.
func eraseInput(e *Event) {
	e.Input = nil
	e.Erased = []string{"/input"}
	e.Masked = nil
}

// parseMaskPath checks that p is a JSON pointer under /input and returns its tokens below /input.
func parseMaskPath(p string) ([]string, error) {
	if p == "" {
		return nil, errors.New("path is empty")
	}
	if !strings.HasPrefix(p, "/") {
		return nil, errors.New(`path must be a JSON pointer starting with "/input"`)
	}
	parts := strings.Split(p[1:], "/")
	if parts[0] != "input" {
		if parts[0] == "result" {
			return nil, errors.New("only the input can be masked: the decision result is logged as decided")
		}
		return nil, errors.New(`path must start with "/input"`)
	}
	tokens := parts[1:]
	for i, t := range tokens {
		u, err := unescapeToken(t)
		if err != nil {
			return nil, err
		}
		tokens[i] = u
	}
	return tokens, nil
}

func unescapeToken(t string) (string, error) {
	if !strings.Contains(t, "~") {
		return t, nil
	}
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		if t[i] != '~' {
			b.WriteByte(t[i])
			continue
		}
		if i+1 == len(t) || (t[i+1] != '0' && t[i+1] != '1') {
			return "", errors.New(`"~" must be followed by 0 or 1 (RFC 6901)`)
		}
		if t[i+1] == '0' {
			b.WriteByte('~')
		} else {
			b.WriteByte('/')
		}
		i++
	}
	return b.String(), nil
}

// arrayIndex parses an RFC 6901 array index: "0" or digits without a leading zero.
func arrayIndex(t string, n int) (int, bool) {
	if t == "" || (len(t) > 1 && t[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return 0, false
		}
	}
	i, err := strconv.Atoi(t)
	if err != nil || i >= n {
		return 0, false
	}
	return i, true
}

// removeAt removes the value at tokens (at least one) from node and returns the new node (an
// array shrinks, so its parent must take the new slice) and whether anything was removed.
func removeAt(node any, tokens []string) (any, bool) {
	t := tokens[0]
	switch v := node.(type) {
	case map[string]any:
		child, ok := v[t]
		if !ok {
			return node, false
		}
		if len(tokens) == 1 {
			delete(v, t)
			return v, true
		}
		nc, removed := removeAt(child, tokens[1:])
		v[t] = nc
		return v, removed
	case []any:
		i, ok := arrayIndex(t, len(v))
		if !ok {
			return node, false
		}
		if len(tokens) == 1 {
			return append(v[:i:i], v[i+1:]...), true
		}
		nc, removed := removeAt(v[i], tokens[1:])
		v[i] = nc
		return v, removed
	}
	return node, false
}

// upsertAt sets the value at tokens (at least one) inside node, creating missing object members
// on the way; array elements must exist. It reports whether the value was set.
func upsertAt(node any, tokens []string, value any) bool {
	for len(tokens) > 1 {
		t := tokens[0]
		switch v := node.(type) {
		case map[string]any:
			child, ok := v[t]
			if !ok {
				child = map[string]any{}
				v[t] = child
			}
			node = child
		case []any:
			i, ok := arrayIndex(t, len(v))
			if !ok {
				return false
			}
			node = v[i]
		default:
			return false
		}
		tokens = tokens[1:]
	}
	switch v := node.(type) {
	case map[string]any:
		v[tokens[0]] = value
		return true
	case []any:
		i, ok := arrayIndex(tokens[0], len(v))
		if !ok {
			return false
		}
		v[i] = value
		return true
	}
	return false
}

// normalize turns an upsert value into decoded JSON, so that every op sees plain JSON values and
// an op's value cannot alias another's.
func normalize(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}
