package principal

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Principal
		wantErr string
	}{
		{in: "user:alice@example.com", want: Principal{User, "alice@example.com"}},
		{in: "group:engineering", want: Principal{Group, "engineering"}},
		{in: "serviceaccount:digest-bot", want: Principal{ServiceAccount, "digest-bot"}},
		{in: "user:spiffe://cluster.local/ns/a/sa/b", want: Principal{User, "spiffe://cluster.local/ns/a/sa/b"}},
		{in: "alice", wantErr: "has no kind: write user:alice"},
		{in: "service_account:bot", wantErr: "did you mean serviceaccount:bot?"},
		{in: "sa:bot", wantErr: "did you mean serviceaccount:bot?"},
		{in: "robot:x", wantErr: `unknown kind "robot"`},
		{in: "user:", wantErr: "empty"},
		{in: "user:a b", wantErr: "whitespace"},
		{in: "user:a\x00", wantErr: "control"},
		{in: "user:" + strings.Repeat("a", 300), wantErr: "longer than"},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Parse(%q) error = %v, want containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if got.String() != tt.in {
			t.Errorf("String() = %q, want %q", got.String(), tt.in)
		}
	}
}

func TestValidServiceAccountName(t *testing.T) {
	for name, want := range map[string]bool{
		"digest-bot": true, "a": true, "bot.v2": true, "9lives": true,
		"": false, "-bot": false, "Bot": false, "bot bot": false, strings.Repeat("a", 64): false,
	} {
		if got := ValidServiceAccountName(name); got != want {
			t.Errorf("ValidServiceAccountName(%q) = %v, want %v", name, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"user:alice", "group:x", "serviceaccount:y", "sa:z", ":", "user:", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(p.String())
		if err != nil || again != p {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
	})
}
