package tracestore

import (
	"encoding/json"
	"fmt"
	"time"
)

// storedValue is an attribute value as the SQLite store's attributes and events columns hold
// it: the value with its type.
type storedValue struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// storedEvent is an Event as the SQLite store's events column holds it.
type storedEvent struct {
	Name       string                 `json:"name"`
	TimeNS     int64                  `json:"time_ns"`
	Attributes map[string]storedValue `json:"attributes,omitempty"`
}

// typeName returns the stored type of a value attributeValue returns.
func typeName(v any) (string, error) {
	switch v.(type) {
	case string:
		return "string", nil
	case int64:
		return "int64", nil
	case float64:
		return "float64", nil
	case bool:
		return "bool", nil
	case []string:
		return "string[]", nil
	case []int64:
		return "int64[]", nil
	case []float64:
		return "float64[]", nil
	case []bool:
		return "bool[]", nil
	}
	return "", fmt.Errorf("attribute value of unsupported type %T", v)
}

// decodeValue returns the Go value of a stored value.
func decodeValue(sv storedValue) (any, error) {
	switch sv.Type {
	case "string":
		return decodeAs[string](sv.Value)
	case "int64":
		return decodeAs[int64](sv.Value)
	case "float64":
		return decodeAs[float64](sv.Value)
	case "bool":
		return decodeAs[bool](sv.Value)
	case "string[]":
		return decodeAs[[]string](sv.Value)
	case "int64[]":
		return decodeAs[[]int64](sv.Value)
	case "float64[]":
		return decodeAs[[]float64](sv.Value)
	case "bool[]":
		return decodeAs[[]bool](sv.Value)
	}
	return nil, fmt.Errorf("unknown attribute type %q", sv.Type)
}

func decodeAs[T any](raw json.RawMessage) (any, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return v, nil
}

func storeAttributes(attrs map[string]any) (map[string]storedValue, error) {
	if len(attrs) == 0 {
		return nil, nil
	}
	out := make(map[string]storedValue, len(attrs))
	for k, v := range attrs {
		typ, err := typeName(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", k, err)
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", k, err)
		}
		out[k] = storedValue{Type: typ, Value: raw}
	}
	return out, nil
}

func loadAttributes(stored map[string]storedValue) (map[string]any, error) {
	if len(stored) == 0 {
		return nil, nil
	}
	out := make(map[string]any, len(stored))
	for k, sv := range stored {
		v, err := decodeValue(sv)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

// encodeAttributes returns the attributes column for attrs.
func encodeAttributes(attrs map[string]any) (string, error) {
	stored, err := storeAttributes(attrs)
	if err != nil {
		return "", err
	}
	if stored == nil {
		return "{}", nil
	}
	b, err := json.Marshal(stored)
	if err != nil {
		return "", fmt.Errorf("encode attributes: %w", err)
	}
	return string(b), nil
}

// decodeAttributes returns the attributes an attributes column holds (nil for none).
func decodeAttributes(col string) (map[string]any, error) {
	var stored map[string]storedValue
	if err := json.Unmarshal([]byte(col), &stored); err != nil {
		return nil, err
	}
	return loadAttributes(stored)
}

// encodeEvents returns the events column for events.
func encodeEvents(events []Event) (string, error) {
	stored := make([]storedEvent, len(events))
	for i, e := range events {
		attrs, err := storeAttributes(e.Attributes)
		if err != nil {
			return "", fmt.Errorf("event %s: %w", e.Name, err)
		}
		stored[i] = storedEvent{Name: e.Name, TimeNS: unixNano(e.Time), Attributes: attrs}
	}
	b, err := json.Marshal(stored)
	if err != nil {
		return "", fmt.Errorf("encode events: %w", err)
	}
	return string(b), nil
}

// decodeEvents returns the events an events column holds (nil for none).
func decodeEvents(col string) ([]Event, error) {
	var stored []storedEvent
	if err := json.Unmarshal([]byte(col), &stored); err != nil {
		return nil, err
	}
	if len(stored) == 0 {
		return nil, nil
	}
	events := make([]Event, len(stored))
	for i, se := range stored {
		attrs, err := loadAttributes(se.Attributes)
		if err != nil {
			return nil, fmt.Errorf("event %s: %w", se.Name, err)
		}
		events[i] = Event{Name: se.Name, Time: time.Unix(0, se.TimeNS).UTC(), Attributes: attrs}
	}
	return events, nil
}
