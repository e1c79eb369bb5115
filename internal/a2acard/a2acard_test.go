package a2acard

import (
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/lush-agents/lush/internal/toolref"
)

func TestCheckAndEndpoint(t *testing.T) {
	card := func(url string, pref a2a.TransportProtocol, extra ...a2a.AgentInterface) *a2a.AgentCard {
		return &a2a.AgentCard{Name: "n", URL: url, Version: "1", ProtocolVersion: "0.3.0", Skills: []a2a.AgentSkill{}, PreferredTransport: pref, AdditionalInterfaces: extra}
	}
	tests := []struct {
		name, ref string
		card      *a2a.AgentCard
		endpoint  string // "" when none may be used
		problem   string // in Check's problems; "" for none
	}{
		{"https", "a2a://a.example.com/x", card("https://a.example.com/rpc", ""), "https://a.example.com/rpc", ""},
		{"http for a2a://", "a2a://a.example.com/x", card("http://a.example.com/rpc", ""), "", "is not an https URL"},
		{"loopback http", "a2a+http://127.0.0.1:9/x", card("http://127.0.0.1:9/rpc", a2a.TransportProtocolJSONRPC), "http://127.0.0.1:9/rpc", ""},
		{"remote http for a2a+http://", "a2a+http://127.0.0.1:9/x", card("http://10.0.0.1/rpc", ""), "", "on this machine"},
		{"userinfo", "a2a://a.example.com/x", card("https://u:p@a.example.com/rpc", ""), "", "is not an https URL"},
		{"grpc only", "a2a://a.example.com/x", card("https://a.example.com/rpc", a2a.TransportProtocolGRPC), "", "no JSONRPC transport"},
		{"jsonrpc additional", "a2a://a.example.com/x", card("https://a.example.com/grpc", a2a.TransportProtocolGRPC,
			a2a.AgentInterface{Transport: a2a.TransportProtocolJSONRPC, URL: "https://a.example.com/rpc"}), "https://a.example.com/rpc", ""},
		{"missing fields", "a2a://a.example.com/x", &a2a.AgentCard{URL: "https://a.example.com/rpc"}, "https://a.example.com/rpc", "field name is missing; field version is missing; field protocolVersion is missing; field skills is missing"},
	}
	for _, tt := range tests {
		ref, err := toolref.Parse(tt.ref)
		if err != nil {
			t.Fatal(err)
		}
		e, ok := Endpoint(ref, tt.card)
		if e != tt.endpoint || ok != (tt.endpoint != "") {
			t.Errorf("%s: Endpoint = %q %v, want %q", tt.name, e, ok, tt.endpoint)
		}
		got := strings.Join(Check(ref, tt.card), "; ")
		if (tt.problem == "") != (got == "") || !strings.Contains(got, tt.problem) {
			t.Errorf("%s: Check = %q, want %q", tt.name, got, tt.problem)
		}
	}
}
