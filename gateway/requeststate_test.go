package gateway

import (
	"strings"
	"testing"
)

// A signed state opens only with its own key, purpose and prefix, unaltered.
func TestStateSigner(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	approvals, exchanges := newStateSigner(key, "approvals"), newStateSigner(key, "exchanges")
	other := newStateSigner([]byte(strings.Repeat("o", 32)), "approvals")
	type payload struct{ A string }
	good := approvals.sign("p1.", payload{"x"})
	for _, tc := range []struct {
		name   string
		signer stateSigner
		prefix string
		state  string
		ok     bool
	}{
		{"as issued", approvals, "p1.", good, true},
		{"another purpose", exchanges, "p1.", good, false},
		{"another key", other, "p1.", good, false},
		{"another prefix", approvals, "p2.", good, false},
		{"payload altered", approvals, "p1.", "p1.eyJBIjoieSJ9" + good[strings.LastIndexByte(good, '.'):], false},
		{"signature altered", approvals, "p1.", good[:len(good)-2] + "AA", false},
		{"no signature", approvals, "p1.", good[:strings.LastIndexByte(good, '.')], false},
		{"too long", approvals, "p1.", good + strings.Repeat("A", maxRequestState), false},
		{"empty", approvals, "p1.", "", false},
	} {
		var got payload
		err := tc.signer.open(tc.prefix, tc.state, &got)
		if (err == nil) != tc.ok || (tc.ok && got.A != "x") {
			t.Errorf("%s: open = %v, payload %+v", tc.name, err, got)
		}
	}
}
