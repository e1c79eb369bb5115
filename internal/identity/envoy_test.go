package identity

import (
	"strings"
	"testing"
)

func TestFromJWTPayload(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     JWTMetadataConfig
		payload map[string]any
		id      string
		groups  string
		err     string
	}{
		{"defaults", JWTMetadataConfig{}, map[string]any{"sub": "carol", "groups": []any{"eng", "ops"}}, "user:carol", "group:eng,group:ops", ""},
		{"space separated groups", JWTMetadataConfig{}, map[string]any{"sub": "carol", "groups": "ops eng"}, "user:carol", "group:eng,group:ops", ""},
		{"service account from another claim", JWTMetadataConfig{PrincipalKind: "serviceaccount", SubjectClaim: "client_id", GroupsClaim: "roles"},
			map[string]any{"sub": "x", "client_id": "ci-bot", "roles": []any{"deployers"}}, "serviceaccount:ci-bot", "group:deployers", ""},
		{"no groups claim", JWTMetadataConfig{}, map[string]any{"sub": "carol"}, "user:carol", "", ""},
		{"no subject", JWTMetadataConfig{}, map[string]any{"groups": []any{"eng"}}, "", "", "has no \"sub\" claim"},
		{"subject not a string", JWTMetadataConfig{}, map[string]any{"sub": 42.0}, "", "", "sub is not a string"},
		{"subject not a principal name", JWTMetadataConfig{}, map[string]any{"sub": "a b"}, "", "", "does not form a principal"},
		{"groups of the wrong type", JWTMetadataConfig{}, map[string]any{"sub": "carol", "groups": 7.0}, "", "", "array of strings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.cfg.FromJWTPayload(tc.payload)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || c.ID != tc.id || strings.Join(c.Groups, ",") != tc.groups || c.Method != MethodEnvoyJWT {
				t.Fatalf("%+v %v, want %s [%s]", c, err, tc.id, tc.groups)
			}
		})
	}
}

func TestFromSPIFFE(t *testing.T) {
	cfg := EnvoyConfig{SPIFFE: []SPIFFEMapping{
		{Prefix: "spiffe://example.org/ns/agents/sa/", Principal: "serviceaccount:{name}", Groups: []string{"group:agents"}},
		{ID: "spiffe://example.org/ns/agents/sa/ingest", Principal: "serviceaccount:ingest-bot"},
	}}
	if err := cfg.Validate("ext_authz.identity"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id, want, err string
		ok            bool
	}{
		{"spiffe://example.org/ns/agents/sa/notes-bot", "serviceaccount:notes-bot", "", true},
		{"spiffe://example.org/ns/agents/sa/ingest", "serviceaccount:ingest-bot", "", true}, // an exact id wins over a prefix
		{"spiffe://example.org/ns/other/sa/x", "", "", false},
		{"spiffe://example.org/ns/agents/sa/", "", "", false},
		{"spiffe://example.org/ns/agents/sa/a/b", "", "does not form a principal", true},
	} {
		c, ok, err := cfg.FromSPIFFE(tc.id)
		if ok != tc.ok || c.ID != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %+v %v %v, want %q %v %q", tc.id, c, ok, err, tc.want, tc.ok, tc.err)
		}
	}
}
