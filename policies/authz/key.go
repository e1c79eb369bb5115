package authz

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"

	"github.com/open-policy-agent/opa/v1/ast"
)

// appendKey appends the cache key of an input value: the value projected onto the dependency
// tree n, in a canonical, collision-free encoding. Two inputs get the same key exactly when
// they agree on every value (and type) the policy can observe.
//
// Every value is a one-byte tag followed by its content; strings, numbers and keys are
// length-prefixed; object keys and set elements are sorted. A projected object lists, for each
// dependency below it in sorted order, the key and the projection of its value ('u' when the
// key is absent).
func appendKey(b []byte, n *depNode, v ast.Value) []byte {
	switch {
	case v == nil:
		return append(b, 'u')
	case n.whole:
		return appendValue(b, v)
	}
	obj, ok := v.(ast.Object)
	if !ok {
		// Constant string keys into anything but an object are undefined: only the type of the
		// value is observable.
		return append(b, 'T', typeTag(v))
	}
	b = append(b, 'O')
	b = binary.AppendUvarint(b, uint64(len(n.names)))
	for i, name := range n.names {
		b = appendString(b, name)
		var child ast.Value
		if t := obj.Get(n.terms[i]); t != nil {
			child = t.Value
		}
		b = appendKey(b, n.kids[n.names[i]], child)
	}
	return b
}

// appendValue appends the canonical encoding of a whole value.
func appendValue(b []byte, v ast.Value) []byte {
	switch v := v.(type) {
	case ast.Null:
		return append(b, 'n')
	case ast.Boolean:
		if v {
			return append(b, 't')
		}
		return append(b, 'f')
	case ast.Number:
		// The exact literal: 1 and 1.0 get different keys (sprintf could tell them apart).
		b = append(b, 'd')
		return appendString(b, string(v))
	case ast.String:
		b = append(b, 's')
		return appendString(b, string(v))
	case *ast.Array:
		b = append(b, 'a')
		b = binary.AppendUvarint(b, uint64(v.Len()))
		for i := range v.Len() {
			b = appendValue(b, v.Elem(i).Value)
		}
		return b
	case ast.Object:
		b = append(b, 'o')
		keys := v.Keys()
		slices.SortFunc(keys, func(x, y *ast.Term) int { return x.Value.Compare(y.Value) })
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = appendValue(b, k.Value)
			b = appendValue(b, v.Get(k).Value)
		}
		return b
	case ast.Set:
		b = append(b, 'S')
		elems := v.Sorted()
		b = binary.AppendUvarint(b, uint64(elems.Len()))
		for i := range elems.Len() {
			b = appendValue(b, elems.Elem(i).Value)
		}
		return b
	default:
		// Not a JSON value (a reference or a comprehension cannot come from an Input): its
		// canonical Rego text, under a tag of its own.
		b = append(b, '?')
		return appendString(b, v.String())
	}
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func typeTag(v ast.Value) byte {
	switch v.(type) {
	case ast.Null:
		return 'n'
	case ast.Boolean:
		return 'b'
	case ast.Number:
		return 'd'
	case ast.String:
		return 's'
	case *ast.Array:
		return 'a'
	case ast.Object:
		return 'o'
	case ast.Set:
		return 'S'
	default:
		return '?'
	}
}

// appendInputKey appends the same key as appendKey(b, n, value) for the value of in, reading
// the fields of in directly instead of converting the whole input (only the arguments, when
// the policy reads them, are converted). It fails only when the arguments cannot be converted.
//
// It returns the arguments' OPA value when it converted them (nil when it did not), so that
// the evaluation that follows a cache miss does not convert them a second time
// (Input.valueWith).
func appendInputKey(b []byte, n *depNode, in *Input) ([]byte, ast.Value, error) {
	var args ast.Value
	if n.whole {
		if in.Arguments != nil {
			var err error
			if args, err = argumentsValue(in.Arguments); err != nil {
				return b, nil, fmt.Errorf("arguments: %w", err)
			}
		}
		v, err := in.valueWith(args)
		if err != nil {
			return b, nil, err
		}
		return appendValue(b, v), args, nil
	}
	b = append(b, 'O')
	b = binary.AppendUvarint(b, uint64(len(n.names)))
	for _, name := range n.names {
		b = appendString(b, name)
		k := n.kids[name]
		switch name {
		case "action":
			b = keyString(b, k, in.Action, true)
		case "live_writes":
			if !k.whole {
				b = append(b, 'T', 'b')
			} else if in.LiveWrites {
				b = append(b, 't')
			} else {
				b = append(b, 'f')
			}
		case "principal":
			b = keyObject(b, k, principalFields, func(b []byte, field string, k *depNode) []byte {
				if field == "id" {
					return keyString(b, k, in.Principal.ID, true)
				}
				return keyStrings(b, k, in.Principal.Groups)
			})
		case "agent":
			b = keyString(b, k, in.Agent, in.Agent != "")
		case "chain":
			b = keyStrings(b, k, in.Chain)
		case "depth":
			if !k.whole {
				b = append(b, 'T', 'd')
				break
			}
			b = append(b, 'd')
			var digits [20]byte
			b = appendString(b, string(strconv.AppendInt(digits[:0], int64(in.Depth), 10)))
		case "tool":
			t := in.Tool
			if t == nil {
				b = append(b, 'u')
				break
			}
			if t.ArgumentsValid != nil || len(t.SchemaErrors) > 0 || t.Refusal != "" {
				// The schema verdict and the tool's refusal are rare (the gateway sends them for
				// a refused call only): project the whole object.
				b = appendKey(b, k, t.value())
				break
			}
			fields := toolFields(t)
			b = keyObject(b, k, fields, func(b []byte, field string, k *depNode) []byte {
				switch field {
				case "access":
					return keyString(b, k, t.Access, t.Access != "")
				case "name":
					return keyString(b, k, t.Name, true)
				case "ref":
					return keyString(b, k, t.Ref, true)
				default:
					return keyString(b, k, t.Risk, t.Risk != "")
				}
			})
		case "arguments":
			if in.Arguments == nil {
				b = append(b, 'u')
				break
			}
			v, err := argumentsValue(in.Arguments)
			if err != nil {
				return b, nil, fmt.Errorf("arguments: %w", err)
			}
			args = v
			b = appendKey(b, k, v)
		case "environment":
			b = keyString(b, k, in.Environment, in.Environment != "")
		case "loop":
			b = keyString(b, k, in.Loop, in.Loop != "")
		case "rate_limit":
			if in.RateLimit == nil {
				b = append(b, 'u')
				break
			}
			b = appendKey(b, k, in.RateLimit.value())
		case "approval":
			if in.Approval == nil {
				b = append(b, 'u')
				break
			}
			b = appendKey(b, k, in.Approval.value())
		case "budget":
			if in.Budget == nil {
				b = append(b, 'u')
				break
			}
			b = appendKey(b, k, in.Budget.value())
		case "call":
			if in.Call == nil {
				b = append(b, 'u')
				break
			}
			b = appendKey(b, k, in.Call.value())
		case "task":
			if in.Task == nil {
				b = append(b, 'u')
				break
			}
			b = appendKey(b, k, in.Task.value())
		default:
			b = append(b, 'u') // not a field of Input: always absent
		}
	}
	return b, args, nil
}

// The fields of the principal and tool objects of the input, sorted.
var principalFields = []string{"groups", "id"}

func toolFields(t *Tool) []string {
	switch {
	case t.Access != "" && t.Risk != "":
		return []string{"access", "name", "ref", "risk"}
	case t.Access != "":
		return []string{"access", "name", "ref"}
	case t.Risk != "":
		return []string{"name", "ref", "risk"}
	default:
		return []string{"name", "ref"}
	}
}

// keyString encodes a string field like appendKey encodes its value (absent unless present).
func keyString(b []byte, k *depNode, s string, present bool) []byte {
	switch {
	case !present:
		return append(b, 'u')
	case !k.whole:
		return append(b, 'T', 's')
	}
	b = append(b, 's')
	return appendString(b, s)
}

// keyStrings encodes an array of strings (always present; nil is []).
func keyStrings(b []byte, k *depNode, ss []string) []byte {
	if !k.whole {
		return append(b, 'T', 'a')
	}
	b = append(b, 'a')
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = append(b, 's')
		b = appendString(b, s)
	}
	return b
}

// keyObject encodes an object with the given (sorted) fields, each encoded by field.
func keyObject(b []byte, k *depNode, fields []string, field func([]byte, string, *depNode) []byte) []byte {
	if k.whole {
		b = append(b, 'o')
		b = binary.AppendUvarint(b, uint64(len(fields)))
		for _, f := range fields {
			b = append(b, 's')
			b = appendString(b, f)
			b = field(b, f, k)
		}
		return b
	}
	b = append(b, 'O')
	b = binary.AppendUvarint(b, uint64(len(k.names)))
	for _, name := range k.names {
		b = appendString(b, name)
		if slices.Contains(fields, name) {
			b = field(b, name, k.kids[name])
		} else {
			b = append(b, 'u')
		}
	}
	return b
}
