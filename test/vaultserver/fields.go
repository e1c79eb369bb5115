package vaultserver

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Request-field parsing with Vault's lenient conversions (framework field
// types): numbers may come as JSON numbers or strings, durations as seconds
// or Go durations (plus a "d" day suffix), lists as arrays or comma-separated
// strings.

func fieldError(key string, v any, err error) error {
	return fmt.Errorf("error converting input %v for field %q: %w", v, key, err)
}

// durationField reads a duration; absent or empty is 0.
func durationField(body map[string]any, key string) (time.Duration, error) {
	v := body[key]
	d, err := parseDuration(v)
	if err != nil {
		return 0, fieldError(key, v, err)
	}
	if d < 0 {
		return 0, fieldError(key, v, fmt.Errorf("cannot be negative"))
	}
	return d, nil
}

func parseDuration(v any) (time.Duration, error) {
	switch v := v.(type) {
	case nil:
		return 0, nil
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return time.Duration(i) * time.Second, nil
		}
		f, err := v.Float64()
		if err != nil {
			return 0, err
		}
		return time.Duration(f * float64(time.Second)), nil
	case string:
		v = strings.TrimSpace(v)
		if v == "" {
			return 0, nil
		}
		if i, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Duration(i) * time.Second, nil
		}
		if days, ok := strings.CutSuffix(v, "d"); ok {
			n, err := strconv.Atoi(days)
			if err != nil {
				return 0, err
			}
			return time.Duration(n) * 24 * time.Hour, nil
		}
		return time.ParseDuration(v)
	}
	return 0, fmt.Errorf("unsupported type %T", v)
}

// intField reads an integer; absent is 0.
func intField(body map[string]any, key string) (int, error) {
	switch v := body[key].(type) {
	case nil:
		return 0, nil
	case json.Number:
		i, err := v.Int64()
		if err != nil {
			return 0, fieldError(key, v, err)
		}
		return int(i), nil
	case string:
		if v == "" {
			return 0, nil
		}
		i, err := strconv.Atoi(v)
		if err != nil {
			return 0, fieldError(key, v, err)
		}
		return i, nil
	default:
		return 0, fieldError(key, v, fmt.Errorf("unsupported type %T", v))
	}
}

// boolField reads a boolean; absent is def.
func boolField(body map[string]any, key string, def bool) (bool, error) {
	switch v := body[key].(type) {
	case nil:
		return def, nil
	case bool:
		return v, nil
	case string:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fieldError(key, v, err)
		}
		return b, nil
	default:
		return false, fieldError(key, v, fmt.Errorf("unsupported type %T", v))
	}
}

// stringListField reads a list of strings from an array or a
// comma-separated string.
func stringListField(body map[string]any, key string) ([]string, error) {
	switch v := body[key].(type) {
	case nil:
		return nil, nil
	case string:
		var out []string
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out, nil
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fieldError(key, v, fmt.Errorf("element %v is not a string", e))
			}
			out = append(out, s)
		}
		return out, nil
	default:
		return nil, fieldError(key, v, fmt.Errorf("unsupported type %T", v))
	}
}

// intListField reads a list of integers (KV version numbers).
func intListField(body map[string]any, key string) ([]int, error) {
	switch v := body[key].(type) {
	case nil:
		return nil, nil
	case []any:
		out := make([]int, 0, len(v))
		for _, e := range v {
			n, err := intField(map[string]any{key: e}, key)
			if err != nil {
				return nil, err
			}
			out = append(out, n)
		}
		return out, nil
	default:
		n, err := intField(body, key)
		if err != nil {
			return nil, err
		}
		return []int{n}, nil
	}
}

// stringMapField reads a map of strings; absent is nil.
func stringMapField(body map[string]any, key string) (map[string]string, error) {
	switch v := body[key].(type) {
	case nil:
		return nil, nil
	case map[string]any:
		out := make(map[string]string, len(v))
		for k, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fieldError(key, v, fmt.Errorf("value of %q is not a string", k))
			}
			out[k] = s
		}
		return out, nil
	default:
		return nil, fieldError(key, v, fmt.Errorf("unsupported type %T", v))
	}
}

// seconds is d in whole seconds, as Vault reports TTLs.
func seconds(d time.Duration) int64 { return int64(d / time.Second) }

// formatTime formats a time as Vault does in JSON (RFC 3339, nanoseconds).
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
