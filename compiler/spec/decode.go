package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lush-agents/lush/internal/diag"
)

// MaxFileSize bounds a spec file. Specs are small; anything larger is a mistake or an attack on
// the parser.
const MaxFileSize = 4 << 20

// maxNodes bounds the nodes one file may expand to, aliases included, so that a "billion laughs"
// document cannot exhaust memory.
const maxNodes = 200_000

// decoder turns yaml.v3 nodes into spec values, reporting every problem with its position.
type decoder struct {
	file  string
	l     *diag.List
	nodes int
}

func (d *decoder) at(n *yaml.Node) diag.Pos {
	return diag.Pos{File: d.file, Line: n.Line, Col: n.Column}
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// document parses data as exactly one YAML document and returns its root node, or nil after
// reporting why there is none.
func (d *decoder) document(data []byte) (root *yaml.Node) {
	file := diag.Pos{File: d.file}
	if len(data) > MaxFileSize {
		d.l.Errorf(file, "file-too-large", "file is %d bytes; spec files are limited to %d", len(data), MaxFileSize)
		return nil
	}
	defer func() {
		// yaml.v3 has panicked on hostile input before; a bad file must never crash a build.
		if r := recover(); r != nil {
			d.l.Errorf(file, "yaml-syntax", "the YAML parser could not read this file: %v", r)
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.l.Errorf(file, "empty-file", "file is empty")
			return nil
		}
		d.syntaxError(err)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.l.ErrorHint(d.at(&extra), "multiple-documents", "remove the '---' separator and everything after it, or move it to its own file",
			"file holds more than one YAML document")
		return nil
	} else if !errors.Is(err, io.EOF) {
		d.syntaxError(err)
		return nil
	}
	if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
		d.l.Errorf(file, "empty-file", "file is empty")
		return nil
	}
	return doc.Content[0]
}

func (d *decoder) syntaxError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	pos := diag.Pos{File: d.file}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		pos.Line, _ = strconv.Atoi(m[1])
		msg = strings.TrimPrefix(err.Error(), m[0])
	}
	d.l.Errorf(pos, "yaml-syntax", "invalid YAML: %s", msg)
}

// resolve follows aliases and counts nodes against the expansion budget. It returns nil once the
// budget is spent (after reporting it once).
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	d.nodes++
	if d.nodes == maxNodes {
		d.l.Errorf(diag.Pos{File: d.file}, "too-many-nodes", "file expands to more than %d YAML nodes (are aliases nested?)", maxNodes)
	}
	if d.nodes >= maxNodes {
		return nil
	}
	return n
}

// kindName names a node's kind for messages ("a list", "a mapping", ...).
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "nothing"
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		}
		return "a string"
	}
	return "an unsupported YAML value"
}

// pair is one key/value of a mapping.
type pair struct {
	key  string
	k, v *yaml.Node
}

// pairs returns the key/value pairs of a mapping with merge keys (<<) expanded, reporting
// duplicate keys. Explicit keys win over merged ones. It returns false if n is not a mapping.
func (d *decoder) pairs(n *yaml.Node, what string) ([]pair, bool) {
	n = d.resolve(n)
	if n == nil {
		return nil, false
	}
	if n.Kind != yaml.MappingNode {
		d.l.Errorf(d.at(n), "wrong-type", "%s must be a mapping, not %s", what, kindName(n))
		return nil, false
	}
	var out, merged []pair
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), n.Content[i+1]
		if k == nil {
			return nil, false
		}
		if k.Kind != yaml.ScalarNode {
			d.l.Errorf(d.at(k), "wrong-type", "keys in %s must be strings, not %s", what, kindName(k))
			continue
		}
		if k.Tag == "!!merge" {
			merged = append(merged, d.mergePairs(v, what)...)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.l.ErrorHint(d.at(k), "duplicate-key", fmt.Sprintf("remove one of them; the first is at line %d", first.Line),
				"%q is set twice in %s", k.Value, what)
			continue
		}
		seen[k.Value] = k
		out = append(out, pair{k.Value, k, v})
	}
	for _, p := range merged {
		if _, dup := seen[p.key]; !dup {
			seen[p.key] = p.k
			out = append(out, p)
		}
	}
	return out, true
}

// mergePairs expands the value of a merge key: one mapping or a list of them.
func (d *decoder) mergePairs(v *yaml.Node, what string) []pair {
	v = d.resolve(v)
	if v == nil {
		return nil
	}
	var sources []*yaml.Node
	switch v.Kind {
	case yaml.MappingNode:
		sources = []*yaml.Node{v}
	case yaml.SequenceNode:
		sources = v.Content
	default:
		d.l.Errorf(d.at(v), "wrong-type", "a merge key (<<) in %s needs a mapping or a list of mappings", what)
		return nil
	}
	var out []pair
	for _, s := range sources {
		ps, _ := d.pairs(s, what)
		out = append(out, ps...)
	}
	return out
}

// fields walks a mapping with a fixed set of known keys. Unknown keys are errors with a
// did-you-mean suggestion. Required keys that are missing are reported at the mapping. fn is
// called for each known key in document order.
func (d *decoder) fields(n *yaml.Node, what string, known, required []string, fn func(key string, v *yaml.Node)) bool {
	ps, ok := d.pairs(n, what)
	if !ok {
		return false
	}
	present := map[string]bool{}
	for _, p := range ps {
		if !slices.Contains(known, p.key) {
			hint := diag.DidYouMean(p.key, known)
			if c, ok := diag.Closest(p.key, known); ok {
				present[c] = true // a misspelt required field is reported once, as the misspelling
			}
			if hint == "" {
				hint = "known fields: " + strings.Join(known, ", ")
			}
			d.l.ErrorHint(d.at(p.k), "unknown-field", hint, "unknown field %q in %s", p.key, what)
			continue
		}
		present[p.key] = true
		fn(p.key, p.v)
	}
	for _, r := range required {
		if !present[r] {
			d.l.Errorf(d.at(d.resolve(n)), "missing-field", "%s is missing required field %q", what, r)
		}
	}
	return true
}

// str decodes a non-empty string scalar.
func (d *decoder) str(n *yaml.Node, what string) (Scalar[string], bool) {
	n = d.resolve(n)
	if n == nil {
		return Scalar[string]{}, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
			d.l.ErrorHint(d.at(n), "wrong-type", fmt.Sprintf("quote it: %q", n.Value), "%s must be a string, not %s", what, kindName(n))
		} else {
			d.l.Errorf(d.at(n), "wrong-type", "%s must be a string, not %s", what, kindName(n))
		}
		return Scalar[string]{}, false
	}
	if strings.TrimSpace(n.Value) == "" {
		d.l.Errorf(d.at(n), "empty-value", "%s is empty", what)
		return Scalar[string]{}, false
	}
	return Scalar[string]{Value: n.Value, Pos: d.at(n)}, true
}

// enum decodes a string that must be one of values.
func (d *decoder) enum(n *yaml.Node, what string, values []string) (Scalar[string], bool) {
	s, ok := d.str(n, what)
	if !ok {
		return s, false
	}
	if !slices.Contains(values, s.Value) {
		hint := diag.DidYouMean(s.Value, values)
		if hint == "" {
			hint = "use one of: " + strings.Join(values, ", ")
		} else {
			hint += " (one of: " + strings.Join(values, ", ") + ")"
		}
		d.l.ErrorHint(s.Pos, "invalid-value", hint, "%s %q is not valid", what, s.Value)
		return s, false
	}
	return s, true
}

// integer decodes an integer within [lo, hi].
func (d *decoder) integer(n *yaml.Node, what string, lo, hi int) (Scalar[int], bool) {
	n = d.resolve(n)
	if n == nil {
		return Scalar[int]{}, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.l.Errorf(d.at(n), "wrong-type", "%s must be a whole number, not %s", what, kindName(n))
		return Scalar[int]{}, false
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if err != nil || v < int64(lo) || v > int64(hi) {
		d.l.Errorf(d.at(n), "invalid-value", "%s must be a whole number from %d to %d", what, lo, hi)
		return Scalar[int]{}, false
	}
	return Scalar[int]{Value: int(v), Pos: d.at(n)}, true
}

// duration decodes a Go duration such as "30s" or "2m", which must be positive and at most max.
func (d *decoder) duration(n *yaml.Node, what string, max time.Duration) (Scalar[time.Duration], bool) {
	s, ok := d.str(n, what)
	if !ok {
		return Scalar[time.Duration]{}, false
	}
	v, err := time.ParseDuration(s.Value)
	if err != nil || v <= 0 || v > max {
		d.l.ErrorHint(s.Pos, "invalid-value", "write a duration such as 500ms, 30s or 2m", "%s %q must be a positive duration up to %s", what, s.Value, max)
		return Scalar[time.Duration]{}, false
	}
	return Scalar[time.Duration]{Value: v, Pos: s.Pos}, true
}

// seq walks a list, calling fn with each item.
func (d *decoder) seq(n *yaml.Node, what string, fn func(item *yaml.Node)) bool {
	n = d.resolve(n)
	if n == nil {
		return false
	}
	if n.Kind != yaml.SequenceNode {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return true // "tools:" with nothing after it is an empty list
		}
		d.l.ErrorHint(d.at(n), "wrong-type", "write each item on its own line starting with '- '", "%s must be a list, not %s", what, kindName(n))
		return false
	}
	for _, item := range n.Content {
		fn(item)
	}
	return true
}

// strs decodes a list of strings.
func (d *decoder) strs(n *yaml.Node, what string) []Scalar[string] {
	var out []Scalar[string]
	d.seq(n, what, func(item *yaml.Node) {
		if s, ok := d.str(item, "each item of "+what); ok {
			out = append(out, s)
		}
	})
	return out
}

// toJSON converts a YAML subtree into the JSON value it denotes (for JSON Schemas written in
// YAML). Only JSON-compatible YAML is accepted.
func (d *decoder) toJSON(n *yaml.Node, what string) (any, bool) {
	n = d.resolve(n)
	if n == nil {
		return nil, false
	}
	switch n.Kind {
	case yaml.MappingNode:
		ps, ok := d.pairs(n, what)
		if !ok {
			return nil, false
		}
		m := make(map[string]any, len(ps))
		for _, p := range ps {
			v, ok := d.toJSON(p.v, what)
			if !ok {
				return nil, false
			}
			m[p.key] = v
		}
		return m, true
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, item := range n.Content {
			v, ok := d.toJSON(item, what)
			if !ok {
				return nil, false
			}
			out = append(out, v)
		}
		return out, true
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			d.l.Errorf(d.at(n), "wrong-type", "%s: %v", what, err)
			return nil, false
		}
		switch x := v.(type) {
		case nil, string, bool, int, float64:
			return x, true
		}
		d.l.Errorf(d.at(n), "wrong-type", "%s: %q is not a JSON value (quote it)", what, n.Value)
		return nil, false
	}
	d.l.Errorf(d.at(n), "wrong-type", "%s holds an unsupported YAML value", what)
	return nil, false
}
