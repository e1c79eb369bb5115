// Package a2acard fetches and checks the Agent Card of a remote A2A agent named by an a2a://
// tool reference. The build checks every card (compiler reachability); the gateway reads the card
// to find where to send a message.
package a2acard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/lush-agents/lush/internal/toolref"
)

// MaxSize bounds the size of an Agent Card.
const MaxSize = 1 << 20

// ErrBad marks a card that was fetched but cannot be read as one.
var ErrBad = errors.New("bad agent card")

// Client fetches Agent Cards. It follows no redirects: the card is the one at the reference.
var Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// Fetch reads the Agent Card of ref, bounded in size, with extra request headers (a credential).
// A card that arrived but is not one is an error wrapping ErrBad.
func Fetch(ctx context.Context, ref toolref.Ref, headers map[string]string) (*a2a.AgentCard, error) {
	card, _, _, err := fetch(ctx, ref, headers)
	return card, err
}

// fetch is Fetch, with the card's size in bytes and the answer's headers.
func fetch(ctx context.Context, ref toolref.Ref, headers map[string]string) (*a2a.AgentCard, int, http.Header, error) {
	if ref.Kind != toolref.A2A {
		return nil, 0, nil, fmt.Errorf("%s is not an A2A agent", ref)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ref.AgentCardURL(), nil)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("agent card request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := Client.Do(req)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("fetch agent card: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return nil, 0, nil, fmt.Errorf("GET %s: %s (an Agent Card is read where the reference names it; no redirects are followed)", ref.AgentCardURL(), resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, nil, &StatusError{URL: ref.AgentCardURL(), Code: resp.StatusCode, Status: resp.Status}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxSize+1))
	if err != nil {
		return nil, 0, nil, fmt.Errorf("read agent card: %w", err)
	}
	if len(body) > MaxSize {
		return nil, 0, nil, fmt.Errorf("%w: it is larger than %d bytes", ErrBad, MaxSize)
	}
	var card a2a.AgentCard
	if err := json.Unmarshal(body, &card); err != nil {
		return nil, 0, nil, fmt.Errorf("%w: it is not an AgentCard in JSON: %w", ErrBad, err)
	}
	return &card, len(body), resp.Header, nil
}

// StatusError is a card request answered with a status other than 200 (and not a redirect).
type StatusError struct {
	URL    string
	Code   int
	Status string
}

func (e *StatusError) Error() string { return "GET " + e.URL + ": " + e.Status }

// Unauthorized reports whether err is a card request the agent refused for want of a credential.
func Unauthorized(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden)
}

// Problem is the text of a Fetch error for a bad card, without the ErrBad prefix.
func Problem(err error) string {
	return strings.TrimPrefix(err.Error(), ErrBad.Error()+": ")
}

// Check lists what makes a card unusable: missing required fields, and no JSON-RPC endpoint Lush
// may reach (https, or plain http on loopback for a2a+http:// references).
func Check(ref toolref.Ref, card *a2a.AgentCard) []string {
	var problems []string
	for _, f := range []struct{ name, value string }{{"name", card.Name}, {"url", card.URL}, {"version", card.Version}, {"protocolVersion", card.ProtocolVersion}} {
		if strings.TrimSpace(f.value) == "" {
			problems = append(problems, "field "+f.name+" is missing")
		}
	}
	if card.Skills == nil {
		problems = append(problems, "field skills is missing")
	}
	if card.URL == "" {
		return problems
	}
	endpoints := jsonrpcEndpoints(card)
	if len(endpoints) == 0 {
		return append(problems, fmt.Sprintf("it offers no JSONRPC transport (preferredTransport %s)", card.PreferredTransport))
	}
	if _, ok := Endpoint(ref, card); !ok {
		want := "an https URL"
		if ref.Insecure {
			want = "an http or https URL on this machine"
		}
		problems = append(problems, fmt.Sprintf("its JSONRPC endpoint %s is not %s", endpoints[0], want))
	}
	return problems
}

// Endpoint is the first JSON-RPC endpoint of card that Lush may send messages to for ref.
func Endpoint(ref toolref.Ref, card *a2a.AgentCard) (string, bool) {
	for _, e := range jsonrpcEndpoints(card) {
		if allowed(ref, e) {
			return e, true
		}
	}
	return "", false
}

// jsonrpcEndpoints are the card's JSON-RPC URLs: the main url unless preferredTransport names
// another transport, then the additional interfaces that are JSON-RPC.
func jsonrpcEndpoints(card *a2a.AgentCard) []string {
	var out []string
	if card.URL != "" && (card.PreferredTransport == "" || card.PreferredTransport == a2a.TransportProtocolJSONRPC) {
		out = append(out, card.URL)
	}
	for _, in := range card.AdditionalInterfaces {
		if in.Transport == a2a.TransportProtocolJSONRPC && in.URL != "" {
			out = append(out, in.URL)
		}
	}
	return out
}

// allowed reports whether Lush may send messages to endpoint for ref.
func allowed(ref toolref.Ref, endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || u.User != nil {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		if !ref.Insecure {
			return false
		}
		r, err := toolref.Parse("a2a+http://" + u.Host + "/")
		return err == nil && r.Insecure
	}
	return false
}
