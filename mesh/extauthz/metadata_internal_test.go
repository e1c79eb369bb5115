package extauthz

import (
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/enforce"
)

// metadataReference is metadata as it was first written, through structpb.NewStruct.
func metadataReference(v *enforce.Verdict) *structpb.Struct {
	if v == nil {
		return nil
	}
	m := map[string]any{"decision_id": v.ID, "outcome": v.Outcome, "access": v.Access, "risk": v.Risk,
		"revision": v.Revision, "rules": strings.Join(v.Rules, ","), "point": Point}
	if v.Tool != "" {
		m["tool"] = v.Tool
	}
	st, _ := structpb.NewStruct(m)
	return st
}

// TestMetadataMatchesNewStruct compares metadata with the structpb.NewStruct reference on random
// and adversarial verdicts: empty fields, invalid UTF-8 in any of them, odd rules.
func TestMetadataMatchesNewStruct(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 7))
	words := []string{"", "allow", "deny", "read", "write", "mcp://notes.internal/mcp", "lush.grant.missing", "0190a1b2-0000-7000-8000-000000000000",
		"\xff", "a\xc3", "é", "\u2028", ",", "x,y", "\x00", strings.Repeat("r", 300)}
	pick := func() string {
		s := words[rnd.IntN(len(words))]
		if rnd.IntN(4) == 0 {
			s += words[rnd.IntN(len(words))]
		}
		return s
	}
	if metadata(nil) != nil {
		t.Fatal("metadata of no verdict is not nil")
	}
	for i := range 5000 {
		v := &enforce.Verdict{Decision: authz.Decision{Outcome: pick(), Access: pick(), Risk: pick(), Revision: pick()}, ID: pick(), Tool: pick()}
		for range rnd.IntN(4) {
			v.Rules = append(v.Rules, pick())
		}
		got, want := metadata(v), metadataReference(v)
		if !proto.Equal(got, want) {
			t.Fatalf("verdict %d %+v: metadata %v, NewStruct %v", i, v, got, want)
		}
	}
}
