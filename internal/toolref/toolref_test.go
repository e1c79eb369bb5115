package toolref

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Ref
	}{
		{"mcp://npx/@modelcontextprotocol/server-filesystem", Ref{Kind: MCP, Launcher: "npx", Package: "@modelcontextprotocol/server-filesystem"}},
		{"mcp://npx/@modelcontextprotocol/server-filesystem@2026.8.31#docs", Ref{Kind: MCP, Launcher: "npx", Package: "@modelcontextprotocol/server-filesystem@2026.8.31", Instance: "docs"}},
		{"mcp://uvx/mcp-server-fetch", Ref{Kind: MCP, Launcher: "uvx", Package: "mcp-server-fetch"}},
		{"mcp://stdio/bin/echo-server", Ref{Kind: MCP, Launcher: "stdio", Package: "bin/echo-server"}},
		{"mcp://integrations.example.com/slack", Ref{Kind: MCP, Host: "integrations.example.com", Path: "/slack"}},
		{"mcp://127.0.0.1:8931/mcp", Ref{Kind: MCP, Host: "127.0.0.1:8931", Path: "/mcp"}},
		{"mcp://[::1]:8931/mcp", Ref{Kind: MCP, Host: "[::1]:8931", Path: "/mcp"}},
		{"mcp://tools.internal", Ref{Kind: MCP, Host: "tools.internal", Path: "/"}},
		{"lush://researcher", Ref{Kind: Agent, Name: "researcher"}},
		{"a2a://agents.example.com/travel", Ref{Kind: A2A, Host: "agents.example.com", Path: "/travel"}},
		{"a2a://agents.example.com", Ref{Kind: A2A, Host: "agents.example.com", Path: "/"}},
		{"a2a+http://127.0.0.1:9100/a2a", Ref{Kind: A2A, Host: "127.0.0.1:9100", Path: "/a2a", Insecure: true}},
		{"a2a+http://localhost:9100/", Ref{Kind: A2A, Host: "localhost:9100", Path: "/", Insecure: true}},
		{"a2a+http://[::1]:9100/x", Ref{Kind: A2A, Host: "[::1]:9100", Path: "/x", Insecure: true}},
		{"tools/clock", Ref{Kind: Local, Name: "clock"}},
		{"builtin/shell", Ref{Kind: Builtin, Name: "shell"}},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		tt.want.raw = tt.in
		if got != tt.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		if got.String() != tt.in {
			t.Errorf("String() = %q", got.String())
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty"},
		{" mcp://x/y", "whitespace"},
		{"mcp:/npx/foo", "did you mean mcp://npx/foo?"},
		{"MCP://npx/foo", "lower case (mcp://npx/foo)"},
		{"https://api.example.com/mcp", "remote MCP servers are named mcp://api.example.com/mcp"},
		{"ftp://x", `unknown scheme "ftp"`},
		{"mcp://npx/", "name the npm package"},
		{"mcp://npx/Bad Package", "not an npm package"},
		{"mcp://stdio/../bin/x", "without '.' or '..'"},
		{"mcp://stdio//etc/passwd", "not a command"},
		{"mcp://Example.com/mcp", "lower case (example.com)"},
		{"mcp://example.com:99999/mcp", "port"},
		{"mcp://exa_mple.com/mcp", "not a valid host name"},
		{"mcp://example.com/a?b=c", "query strings"},
		{"mcp://npx/foo#Bad", "instance"},
		{"lush://Researcher", "not an agent name"},
		{"lush://", "not an agent name"},
		{"a2a://", "missing host"},
		{"a2a://Agents.example.com/x", "lower case"},
		{"a2a://agents.example.com/x?y=1", "query strings"},
		{"a2a://agents.example.com/x#one", "#instances"},
		{"a2a://agents.example.com/x/.well-known/agent-card.json", "not its Agent Card: a2a://agents.example.com/x"},
		{"a2a+http://agents.example.com/x", "loopback addresses only"},
		{"a2a+http://10.0.0.1/x", "loopback addresses only"},
		{"a2a+https://agents.example.com/x", "named a2a://agents.example.com/x"},
		{"A2A://agents.example.com/x", "lower case (a2a://agents.example.com/x)"},
		{"a2a:/agents.example.com/x", "did you mean a2a://agents.example.com/x?"},
		{"tools/", "not a local tool name"},
		{"tools/../x", "not a local tool name"},
		{"builtin/sh", "no such built-in tool"},
		{"shell", "write builtin/shell"},
		{"./tools/x", "local tools are written tools/<name>"},
		{"researcher", "is not one of"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) error = %v, want containing %q", tt.in, err, tt.want)
		}
	}
}

func TestKinds(t *testing.T) {
	r, _ := Parse("mcp://npx/x")
	if !r.Stdio() || r.Remote() || r.SingleTool() || r.DefaultURL() != "" {
		t.Errorf("npx ref: stdio=%v remote=%v single=%v", r.Stdio(), r.Remote(), r.SingleTool())
	}
	r, _ = Parse("mcp://api.example.com/v1/mcp")
	if r.Stdio() || !r.Remote() || r.DefaultURL() != "https://api.example.com/v1/mcp" {
		t.Errorf("remote ref: %+v url=%s", r, r.DefaultURL())
	}
	r, _ = Parse("lush://a")
	if !r.SingleTool() {
		t.Error("lush:// should be a single tool")
	}
}

func TestA2AURLs(t *testing.T) {
	tests := []struct{ ref, base, card string }{
		{"a2a://agents.example.com/travel", "https://agents.example.com/travel", "https://agents.example.com/travel/.well-known/agent-card.json"},
		{"a2a://agents.example.com", "https://agents.example.com/", "https://agents.example.com/.well-known/agent-card.json"},
		{"a2a+http://127.0.0.1:9100/a2a", "http://127.0.0.1:9100/a2a", "http://127.0.0.1:9100/a2a/.well-known/agent-card.json"},
		{"lush://a", "", ""},
		{"mcp://npx/x", "", ""},
	}
	for _, tt := range tests {
		r, err := Parse(tt.ref)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.ref, err)
		}
		if r.DefaultURL() != tt.base || r.AgentCardURL() != tt.card {
			t.Errorf("%s: base %q card %q, want %q %q", tt.ref, r.DefaultURL(), r.AgentCardURL(), tt.base, tt.card)
		}
		if r.Kind == A2A && (!r.SingleTool() || r.Remote() || r.Stdio()) {
			t.Errorf("%s: an A2A agent is a single tool, not an MCP server", tt.ref)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"mcp://npx/@a/b@1", "mcp://h:1/p#i", "lush://a", "tools/t", "builtin/shell", "mcp://[::1]:80/x", "mcp://stdio/a/b", "a2a://h/p", "a2a+http://127.0.0.1:1/p"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		if r.String() != s {
			t.Fatalf("canonical form of %q is %q", s, r.String())
		}
		again, err := Parse(r.String())
		if err != nil || again != r {
			t.Fatalf("round trip of %q: %+v, %v", s, again, err)
		}
	})
}
