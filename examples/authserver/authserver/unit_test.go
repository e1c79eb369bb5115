package authserver

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestResourceToAudience(t *testing.T) {
	tests := []struct {
		name, body string
		want       url.Values // nil: an error
	}{
		{"no resource", "grant_type=client_credentials&scope=a", url.Values{"grant_type": {"client_credentials"}, "scope": {"a"}}},
		{"one resource", "grant_type=client_credentials&resource=https%3A%2F%2Fr1", url.Values{"grant_type": {"client_credentials"}, "resource": {"https://r1"}, "audience": {"https://r1"}}},
		{"resources and audience", "audience=https%3A%2F%2Fa+https%3A%2F%2Fr1&resource=https%3A%2F%2Fr1&resource=https%3A%2F%2Fr2",
			url.Values{"resource": {"https://r1", "https://r2"}, "audience": {"https://a https://r1 https://r2"}}},
		{"a resource with a space", "resource=https%3A%2F%2Fr1+x", nil},
		{"not a form", "resource=%zz", nil},
		{"too big", "scope=" + strings.Repeat("a", maxFrontBody), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/oauth2/token", strings.NewReader(tt.body))
			err := resourceToAudience(r)
			if tt.want == nil {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(r.Body)
			got, _ := url.ParseQuery(string(b))
			if got.Encode() != tt.want.Encode() || r.ContentLength != int64(len(b)) {
				t.Errorf("body = %s (length %d), want %s", got.Encode(), r.ContentLength, tt.want.Encode())
			}
		})
	}
}

func TestCleanRegistration(t *testing.T) {
	resp := &http.Response{Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"client_id":"x","client_uri":"","logo_uri":"","contacts":null,"redirect_uris":["http://a"],"metadata":{"k":""}}`))}
	if err := cleanRegistration(resp); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if want := `{"client_id":"x","metadata":{"k":""},"redirect_uris":["http://a"]}`; string(b) != want {
		t.Errorf("cleaned = %s, want %s", b, want)
	}
	if resp.ContentLength != int64(len(b)) {
		t.Errorf("Content-Length %d, body %d bytes", resp.ContentLength, len(b))
	}
}

func TestConsentAudience(t *testing.T) {
	req := func(requestURL string, requested, allowed []string) consentRequest {
		var c consentRequest
		c.RequestURL, c.RequestedAccessTokenAudience, c.Client.Audience = requestURL, requested, allowed
		return c
	}
	tests := []struct {
		name    string
		req     consentRequest
		want    []string
		wantBad string
	}{
		{"nothing asked", req("http://as/oauth2/auth?client_id=c", nil, []string{"https://r1"}), []string{}, ""},
		{"a resource", req("http://as/oauth2/auth?resource=https%3A%2F%2Fr1", nil, []string{"https://r1"}), []string{"https://r1"}, ""},
		{"audience and resources", req("http://as/oauth2/auth?resource=https%3A%2F%2Fr1&resource=https%3A%2F%2Fr2&audience=https%3A%2F%2Fr1",
			[]string{"https://r1"}, []string{"https://r1", "https://r2"}), []string{"https://r1", "https://r2"}, ""},
		{"a resource the client may not ask for", req("http://as/oauth2/auth?resource=https%3A%2F%2Fevil", nil, []string{"https://r1"}), nil, "https://evil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, bad := consentAudience(tt.req)
			if bad != tt.wantBad || !slices.Equal(got, tt.want) {
				t.Errorf("consentAudience = %v, %q; want %v, %q", got, bad, tt.want, tt.wantBad)
			}
		})
	}
}

func TestActDepth(t *testing.T) {
	nest := func(n int) any {
		var act any
		for range n {
			act = map[string]any{"sub": "a", "act": act}
		}
		return act
	}
	for _, n := range []int{0, 1, 3, maxActDepth} {
		if got := actDepth(nest(n)); got != n {
			t.Errorf("actDepth(%d nested) = %d", n, got)
		}
	}
	if got := actDepth(nest(maxActDepth + 5)); got <= maxActDepth {
		t.Errorf("actDepth(%d nested) = %d, want more than %d", maxActDepth+5, got, maxActDepth)
	}
	if got := actDepth("agent"); got != 1 {
		t.Errorf("actDepth(a string) = %d, want 1", got)
	}
}
