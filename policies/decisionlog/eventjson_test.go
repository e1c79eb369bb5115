package decisionlog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// encodeEvent writes the same document as encodeJSON, byte for byte, for random events whose
// strings need every kind of JSON escape (quotes, backslashes, control characters, HTML
// characters, non-ASCII, invalid UTF-8, U+2028), with nil and empty maps and slices, raw
// documents with whitespace, credentials or none, and timestamps in any zone.
func TestEncodeEventIsEncodeJSON(t *testing.T) {
	fast := []string{"", "a", "mcp://tests.internal/mcp", `"`, `\`, "<&>", "ok", "\x7f", " ", "/"}
	all := append([]string{"\x00", "\n\t\r\b\f", "\x1f", "é", "\xff", "\u2028", "日本"}, fast...)
	var words []string
	raws := []string{`{}`, `null`, `{"a":1}`, " { \"a\" : [ 1 , \"x y\" ] }\n", `"\u003c<>&"`, `[{"k":"\u2028"}]`, `{"p":"\ud800"}`, `1e300`}
	r := rand.New(rand.NewPCG(5, 6))
	w := func() string {
		s := ""
		for range r.IntN(4) {
			s += words[r.IntN(len(words))]
		}
		return s
	}
	strs := func() []string {
		switch r.IntN(4) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		var ss []string
		for range r.IntN(3) + 1 {
			ss = append(ss, w())
		}
		return ss
	}
	raw := func() json.RawMessage {
		if r.IntN(5) == 0 {
			return nil
		}
		return json.RawMessage(raws[r.IntN(len(raws))])
	}
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+1800), time.FixedZone("y", -7*3600)}
	fastPath := 0
	for i := range 20000 {
		words = all
		if i%2 == 0 { // strings the fast path writes itself
			words = fast
		}
		e := &Event{DecisionID: w(), Path: w(), Input: raw(), Result: raw(),
			Timestamp: randTime(r).In(zones[r.IntN(len(zones))]),
			Erased:    strs(), Masked: strs(), Revision: w(), Point: w(), Principal: w(), Groups: strs(), Agent: w(),
			Chain: strs(), Action: w(), Tool: w(), ToolName: w(), Access: w(), Risk: w(), Outcome: w(), Rules: strs(),
			LatencyNS: r.Int64() - r.Int64(), Environment: w(), TraceID: w(), SpanID: w(), Error: w(), Parent: w(),
			Charges: []Charge{{}}}
		if r.IntN(4) > 0 {
			e.Labels = map[string]string{}
			for range r.IntN(4) {
				e.Labels[w()] = w()
			}
			e.Bundles = map[string]Bundle{}
			for range r.IntN(3) {
				e.Bundles[w()] = Bundle{Revision: w()}
			}
			e.Metrics = map[string]int64{}
			for range r.IntN(3) {
				e.Metrics[w()] = r.Int64() - r.Int64()
			}
		}
		if r.IntN(2) == 0 {
			e.Credential = &CredentialUse{Type: w(), Obtained: w(), Source: w(), Act: strs()}
		}
		if i%1000 == 0 { // an empty raw document is an error, as encodeJSON says
			e.Input = json.RawMessage{}
		}
		want, werr := encodeJSON(e)
		got, err := encodeEvent(e)
		if (err == nil) != (werr == nil) || got != string(want) {
			t.Fatalf("event %d:\n got %s, %v\nwant %s, %v", i, got, err, want, werr)
		}
		if _, ok := encodeEventFast(e); ok {
			fastPath++
		}
	}
	if fastPath < 5000 || fastPath > 15000 {
		t.Errorf("%d of 20000 events took the fast path", fastPath)
	}
}

// An event as the gateway writes it takes the fast path.
func TestEncodeEventFastPath(t *testing.T) {
	e := &Event{DecisionID: "0198c0de-0000-7000-8000-000000000001", Path: DefaultPath, Input: json.RawMessage(`{"action":"tools/call","arguments":{"text":"ping <&>"}}`),
		Result: json.RawMessage(`{"allow":true}`), Timestamp: time.Now().UTC(), Labels: map[string]string{"id": "i", "version": "v", "environment": ""},
		Bundles: map[string]Bundle{"lush": {Revision: "r"}}, Metrics: map[string]int64{"timer_lush_decision_ns": 1234}, Revision: "r",
		Point: "mcp-gateway", Principal: "user:alice", Groups: []string{"group:eng"}, Agent: "assistant", Chain: []string{"assistant"},
		Action: "tools/call", Tool: "mcp://x", ToolName: "echo", Access: "read", Risk: "read", Outcome: "allow", Rules: []string{}}
	if _, ok := encodeEventFast(e); !ok {
		t.Error("an event as the gateway writes it fell back to encodeJSON")
	}
	want, _ := encodeJSON(e)
	if got, _ := encodeEvent(e); got != string(want) {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

// Record checks an event's raw documents apart only when encodeEventFast cannot write it, since
// the fast writer refuses an invalid one: it accepts and refuses exactly the events that
// validate, validateCharges and encodeJSON, in this order, accept and refuse, with the same error, for valid, invalid, empty and missing documents, with strings the fast
// writer leaves to encodeJSON or not, and charges valid or not (whose error comes after the
// documents').
func TestRecordRefusesWhatValidateRefuses(t *testing.T) {
	ctx := context.Background()
	l := openLog(t)
	raws := []json.RawMessage{nil, {}, json.RawMessage(`{}`), json.RawMessage(" [1, {\"a\":null}] "), json.RawMessage(`{`),
		json.RawMessage(`{"a":}`), json.RawMessage(`nul`), json.RawMessage("\"\x01\""), json.RawMessage(`{}x`),
		json.RawMessage(` `), json.RawMessage(`[1,]`), json.RawMessage(`"\ud800"`), json.RawMessage("\"\xff\"")}
	n := 0
	for _, in := range raws {
		for _, res := range raws {
			for _, slow := range []bool{false, true} {
				for _, badCharge := range []bool{false, true} {
					n++
					e := sampleEvent(fmt.Sprintf("docs-%03d", n))
					e.Input, e.Result = in, res
					if slow {
						e.Principal = "user:é" // encodeEventFast leaves non-ASCII to encodeJSON
					}
					if badCharge {
						e.Charges = []Charge{{Budget: "", Used: -1}}
					}
					// What Record did before: validate, then the charges, then encodeJSON.
					want := e.validate()
					if want == nil {
						want = validateCharges(e.Charges)
					}
					if want == nil {
						_, want = encodeJSON(e)
					}
					err := l.Record(ctx, e)
					if (err == nil) != (want == nil) || (err != nil && !strings.Contains(err.Error(), want.Error())) {
						t.Errorf("input %q, result %q, slow %v, bad charge %v: Record says %v, validate %v", in, res, slow, badCharge, err, want)
					}
				}
			}
		}
	}
}

// randTime is a time at random, now and then one of the years time.Time.MarshalJSON refuses or
// is near refusing.
func randTime(r *rand.Rand) time.Time {
	switch r.IntN(8) {
	case 0:
		return []time.Time{{}, time.Date(-1, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("z", -3600))}[r.IntN(6)]
	case 1:
		return time.Unix(r.Int64N(1<<33), 0)
	}
	return time.Unix(r.Int64N(1<<33), r.Int64N(1e9))
}

// randDocument is random JSON text with whitespace anywhere and every kind of value, escape and
// number; mangled, a byte of it changed or the text cut short.
func randDocument(r *rand.Rand, depth int) string {
	ws := func() string { return []string{"", "", " ", "\n", "\t", "\r\n "}[r.IntN(6)] }
	n := 10
	if depth > 4 {
		n = 7
	}
	switch r.IntN(n) {
	case 0:
		return []string{"true", "false", "null"}[r.IntN(3)]
	case 1, 2:
		return []string{"0", "-0", "1", "-12", "1.5", "0.001", "1e5", "1E+5", "-2.5e-10", "123456789012345678901234567890"}[r.IntN(10)]
	case 3, 4, 5, 6:
		return `"` + []string{"", "a", `\"`, `\\`, `\/`, `\b\f\n\r\t`, `\u00e9`, `\uD83D\uDE00`, `\ud800`, "é", "\xff\xfe", "<&>",
			"\u2028", "x y", "{[,:]}"}[r.IntN(15)] + `"`
	case 7, 8:
		var b strings.Builder
		b.WriteString("{" + ws())
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteString(ws() + "," + ws())
			}
			b.WriteString(randDocument(r, 99) + ws() + ":" + ws() + randDocument(r, depth+1))
		}
		b.WriteString(ws() + "}")
		return b.String()
	default:
		var b strings.Builder
		b.WriteString("[" + ws())
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteString(ws() + "," + ws())
			}
			b.WriteString(randDocument(r, depth+1))
		}
		b.WriteString(ws() + "]")
		return b.String()
	}
}

// TestAppendCompactIsCompact compares the event writer's compactor with json.Compact on random,
// mangled and adversarial documents: the same bytes, or both refusing, or (nested deeper than
// the compactor goes) json.Compact left to judge.
func TestAppendCompactIsCompact(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 3))
	docs := []string{"", " ", "{}", "[]", "{ }", `{"a":1}`, " \t\n{\"a\" : [ 1 , 2 ] }\r\n", "01", "-", "1.", ".5", "1e", "1e+",
		"-01", "tru", "nul", "truex", `"\u12"`, `"\u12G4"`, `"\x"`, "\"\x01\"", `"abc`, `{"a"}`, `{"a":}`, `{,}`, `[1,]`,
		`[1 2]`, `{"a":1,}`, `{1:2}`, "\"\x1f\"", "\"\x20\"", "\"\x7f\"", "[" + strings.Repeat("[", 200) + strings.Repeat("]", 201),
		strings.Repeat("[", 129) + strings.Repeat("]", 129), strings.Repeat("[", 128) + strings.Repeat("]", 128), "1 2", "\x00", "\v1"}
	for range 30000 {
		d := randDocument(r, 0)
		switch r.IntN(4) {
		case 0:
			b := []byte(d)
			b[r.IntN(len(b))] = ` {}[]",:\\0-.eE+tnu1a`[r.IntN(21)]
			d = string(b)
		case 1:
			d = d[:r.IntN(len(d)+1)]
		}
		docs = append(docs, d)
	}
	own := 0
	for _, d := range docs {
		var want bytes.Buffer
		werr := json.Compact(&want, []byte(d))
		got, ok := appendCompact([]byte("prefix"), []byte(d))
		switch {
		case ok && (werr != nil || string(got) != "prefix"+want.String()):
			t.Fatalf("appendCompact(%q) = %q, json.Compact = %q, %v", d, got, want.String(), werr)
		case !ok && werr == nil && strings.Count(d, "[")+strings.Count(d, "{") <= maxCompactDepth:
			t.Fatalf("appendCompact(%q) refused what json.Compact takes: %q", d, want.String())
		case !ok && string(got) != "prefix":
			t.Fatalf("appendCompact(%q) refused and returned %q, not its dst", d, got)
		}
		if ok {
			own++
		}
		w := eventWriter{buf: new(bytes.Buffer)}
		if w.raw(json.RawMessage(d)) != (werr == nil) || w.buf.String() != want.String() {
			t.Fatalf("raw(%q) wrote %q, json.Compact %q, %v", d, w.buf.String(), want.String(), werr)
		}
	}
	if own < 5000 {
		t.Errorf("only %d documents were valid: the comparison tests little", own)
	}
}
