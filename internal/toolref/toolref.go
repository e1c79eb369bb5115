// Package toolref parses tool references, the strings that name a tool in an agent's allowlist,
// in tool_grants, tool_classes, servers and mcp_credentials. A reference is the tool's identity
// everywhere in Lush: in policy input, in decisions and in the decision log.
//
// The forms are:
//
//	mcp://npx/<npm-package>[@version][#instance]   stdio server started with npx
//	mcp://uvx/<python-package>[#instance]          stdio server started with uvx
//	mcp://stdio/<command>[#instance]               stdio server: an executable (project-relative path or on PATH)
//	mcp://<host>[:port]/<path>[#instance]          remote server (streamable HTTP at https://host/path
//	                                               unless lush.yaml servers: sets url and transport)
//	lush://<agent>                                 another agent of the project, as a tool
//	a2a://<host>[:port]/<path>                     a remote A2A agent whose Agent Card is at
//	                                               https://host/path/.well-known/agent-card.json
//	a2a+http://<loopback>[:port]/<path>            the same over plain HTTP, for localhost and
//	                                               loopback addresses only (tests, local agents)
//	tools/<name>                                   a local tool (tools/<name>/tool.yaml)
//	builtin/<name>                                 a tool built into Lush (shell, file_read, file_write, file_list)
//
// The optional #instance suffix tells apart two configurations of one server, for example the
// filesystem server over two directories.
package toolref

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Kind is the kind of tool a reference names.
type Kind string

// The kinds of tool.
const (
	MCP     Kind = "mcp"     // an MCP server, local (stdio) or remote
	Agent   Kind = "agent"   // lush://<agent>
	A2A     Kind = "a2a"     // a2a://<host>/<path>: a remote A2A agent
	Local   Kind = "local"   // tools/<name>
	Builtin Kind = "builtin" // builtin/<name>
)

// Launchers are the reserved hosts of mcp:// that mean "start a local stdio server".
var Launchers = []string{"npx", "uvx", "stdio"}

// Builtins are the reserved names of Lush's built-in tools.
var Builtins = []string{"file_list", "file_read", "file_write", "shell"}

// Ref is a parsed tool reference. String returns its canonical form, which is the form it was
// parsed from: Parse rejects non-canonical spellings rather than rewriting them, so that the same
// tool is always written the same way.
type Ref struct {
	Kind Kind
	raw  string

	// MCP servers and A2A agents (Host, Path).
	Launcher string // "npx", "uvx" or "stdio" for local servers; "" for remote
	Package  string // the npm or Python package (with @version), or the stdio command
	Host     string // remote: host[:port]
	Path     string // remote: the URL path, starting with "/"
	Instance string // the #instance suffix, if any
	Insecure bool   // a2a+http://: plain HTTP (loopback hosts only)

	// Agents, local and built-in tools.
	Name string
}

// String returns the canonical reference.
func (r Ref) String() string { return r.raw }

// Stdio reports whether the reference names a local MCP server that Lush starts.
func (r Ref) Stdio() bool { return r.Kind == MCP && r.Launcher != "" }

// Remote reports whether the reference names a remote MCP server.
func (r Ref) Remote() bool { return r.Kind == MCP && r.Launcher == "" }

// SingleTool reports whether the reference names exactly one tool (everything but MCP servers),
// so that narrowing to named tools does not apply to it. An A2A agent is one tool: sending it a
// message.
func (r Ref) SingleTool() bool { return r.Kind != MCP }

// DefaultURL is where a remote server lives when lush.yaml does not say otherwise. For an A2A
// agent it is the base URL its Agent Card is found under.
func (r Ref) DefaultURL() string {
	switch {
	case r.Remote():
		return "https://" + r.Host + r.Path
	case r.Kind == A2A && r.Insecure:
		return "http://" + r.Host + r.Path
	case r.Kind == A2A:
		return "https://" + r.Host + r.Path
	}
	return ""
}

// AgentCardPath is where an A2A agent publishes its Agent Card, below its base URL.
const AgentCardPath = "/.well-known/agent-card.json"

// AgentCardURL is the URL of an A2A agent's Agent Card; "" for other references.
func (r Ref) AgentCardURL() string {
	if r.Kind != A2A {
		return ""
	}
	return strings.TrimSuffix(r.DefaultURL(), "/") + AgentCardPath
}

var (
	agentName    = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	toolName     = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	instanceName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	npmPackage   = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*(@[A-Za-z0-9._+~^<>=*-]+)?$`)
	pyPackage    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(==[A-Za-z0-9.+!_-]+)?$`)
	commandPath  = regexp.MustCompile(`^[A-Za-z0-9._][A-Za-z0-9._+-]*(/[A-Za-z0-9._][A-Za-z0-9._+-]*)*$`)
	hostLabel    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	urlPath      = regexp.MustCompile(`^(/[A-Za-z0-9._~!$&'()*+,;=:@%-]*)*$`)
)

// ValidAgentName reports whether name can name an agent (and so appear in lush://name and URLs).
func ValidAgentName(name string) bool { return agentName.MatchString(name) }

// ValidToolName reports whether name can name a local tool (tools/name).
func ValidToolName(name string) bool { return toolName.MatchString(name) }

// Parse parses a tool reference. Errors say what form was expected and, when the input looks
// like a near miss, the form that was probably meant.
func Parse(s string) (Ref, error) {
	switch {
	case s == "":
		return Ref{}, fmt.Errorf("empty tool reference")
	case strings.TrimSpace(s) != s:
		return Ref{}, fmt.Errorf("tool reference %q has surrounding whitespace", s)
	case strings.HasPrefix(s, "mcp://"):
		return parseMCP(s)
	case strings.HasPrefix(s, "lush://"):
		name := strings.TrimPrefix(s, "lush://")
		if !agentName.MatchString(name) {
			return Ref{}, fmt.Errorf("lush://%s: %q is not an agent name (lower-case letters, digits and '-', starting with a letter)", name, name)
		}
		return Ref{Kind: Agent, raw: s, Name: name}, nil
	case strings.HasPrefix(s, "a2a://"), strings.HasPrefix(s, "a2a+http://"):
		return parseA2A(s)
	case strings.HasPrefix(s, "tools/"):
		name := strings.TrimPrefix(s, "tools/")
		if !toolName.MatchString(name) {
			return Ref{}, fmt.Errorf("%s: %q is not a local tool name (lower-case letters, digits, '-' and '_', starting with a letter; the tool lives in tools/<name>/tool.yaml)", s, name)
		}
		return Ref{Kind: Local, raw: s, Name: name}, nil
	case strings.HasPrefix(s, "builtin/"):
		name := strings.TrimPrefix(s, "builtin/")
		if !slices.Contains(Builtins, name) {
			return Ref{}, fmt.Errorf("%s: no such built-in tool; the built-in tools are %s", s, "builtin/"+strings.Join(Builtins, ", builtin/"))
		}
		return Ref{Kind: Builtin, raw: s, Name: name}, nil
	case slices.Contains(Builtins, s):
		return Ref{}, fmt.Errorf("%q is a built-in tool: write builtin/%s", s, s)
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		switch strings.ToLower(scheme) {
		case "mcp", "lush", "a2a", "a2a+http":
			return Ref{}, fmt.Errorf("tool reference %q: write the scheme in lower case (%s://%s)", s, strings.ToLower(scheme), rest)
		case "a2a+https":
			return Ref{}, fmt.Errorf("tool reference %q: A2A agents over HTTPS are named a2a://%s", s, rest)
		case "http", "https", "mcp+http", "mcp+https", "sse", "mcp+sse", "ws", "wss":
			return Ref{}, fmt.Errorf("tool reference %q: remote MCP servers are named mcp://%s; set the URL and transport in lush.yaml (servers)", s, rest)
		}
		return Ref{}, fmt.Errorf("tool reference %q has unknown scheme %q: use mcp://, lush://, a2a://, tools/<name> or builtin/<name>", s, scheme)
	}
	if strings.HasPrefix(s, "mcp:") || strings.HasPrefix(s, "lush:") || strings.HasPrefix(s, "a2a:") {
		scheme, rest, _ := strings.Cut(s, ":")
		return Ref{}, fmt.Errorf("tool reference %q: did you mean %s://%s?", s, scheme, strings.TrimLeft(rest, "/"))
	}
	if strings.HasPrefix(s, "./tools/") || strings.HasPrefix(s, "tool/") {
		return Ref{}, fmt.Errorf("tool reference %q: local tools are written tools/<name>", s)
	}
	return Ref{}, fmt.Errorf("tool reference %q is not one of mcp://…, lush://<agent>, a2a://…, tools/<name> or builtin/<name>", s)
}

func parseMCP(s string) (Ref, error) {
	rest := strings.TrimPrefix(s, "mcp://")
	r := Ref{Kind: MCP, raw: s}
	if before, inst, ok := strings.Cut(rest, "#"); ok {
		if !instanceName.MatchString(inst) {
			return Ref{}, fmt.Errorf("%s: instance %q must be lower-case letters, digits, '-' and '_'", s, inst)
		}
		rest, r.Instance = before, inst
	}
	if strings.ContainsAny(rest, "?") {
		return Ref{}, fmt.Errorf("%s: query strings are not part of a tool reference; put arguments and URLs in lush.yaml (servers)", s)
	}
	host, path, _ := strings.Cut(rest, "/")
	if slices.Contains(Launchers, host) {
		r.Launcher, r.Package = host, path
		switch {
		case path == "":
			return Ref{}, fmt.Errorf("%s: name the %s after %s/, e.g. mcp://%s/%s", s, launcherWhat(host), host, host, launcherExample(host))
		case host == "npx" && !npmPackage.MatchString(path):
			return Ref{}, fmt.Errorf("%s: %q is not an npm package name (lower case, optional @scope/ and @version)", s, path)
		case host == "uvx" && !pyPackage.MatchString(path):
			return Ref{}, fmt.Errorf("%s: %q is not a Python package name", s, path)
		case host == "stdio" && (!commandPath.MatchString(path) || slices.Contains(strings.Split(path, "/"), "..") || slices.Contains(strings.Split(path, "/"), ".")):
			return Ref{}, fmt.Errorf("%s: %q is not a command: use a name on PATH or a path inside the project, without '.' or '..' segments", s, path)
		}
		return r, nil
	}
	if host == "" {
		return Ref{}, fmt.Errorf("%s: missing host: write mcp://<host>/<path> for a remote server or mcp://npx/<package> for a local one", s)
	}
	if err := checkHost(host); err != nil {
		return Ref{}, fmt.Errorf("%s: %w", s, err)
	}
	r.Host, r.Path = host, "/"+path
	if !urlPath.MatchString(r.Path) || strings.Contains(r.Path, "//") {
		return Ref{}, fmt.Errorf("%s: %q is not a valid URL path", s, r.Path)
	}
	return r, nil
}

// parseA2A parses a2a://host[:port]/path and a2a+http://loopback[:port]/path.
func parseA2A(s string) (Ref, error) {
	scheme, rest, _ := strings.Cut(s, "://")
	r := Ref{Kind: A2A, raw: s, Insecure: scheme == "a2a+http"}
	if strings.ContainsAny(rest, "?#") {
		return Ref{}, fmt.Errorf("%s: query strings and #instances are not part of an A2A agent's reference", s)
	}
	host, path, _ := strings.Cut(rest, "/")
	if host == "" {
		return Ref{}, fmt.Errorf("%s: missing host: write %s://<host>/<path>", s, scheme)
	}
	if err := checkHost(host); err != nil {
		return Ref{}, fmt.Errorf("%s: %w", s, err)
	}
	r.Host, r.Path = host, "/"+path
	if !urlPath.MatchString(r.Path) || strings.Contains(r.Path, "//") {
		return Ref{}, fmt.Errorf("%s: %q is not a valid URL path", s, r.Path)
	}
	if strings.HasSuffix(r.Path, AgentCardPath) {
		return Ref{}, fmt.Errorf("%s: name the agent's base URL, not its Agent Card: %s://%s%s", s, scheme, host, strings.TrimSuffix(r.Path, AgentCardPath))
	}
	if r.Insecure && !loopback(host) {
		return Ref{}, fmt.Errorf("%s: a2a+http:// is for localhost and loopback addresses only; remote agents are reached over HTTPS: a2a://%s", s, rest)
	}
	return r, nil
}

// loopback reports whether host[:port] names this machine.
func loopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

func checkHost(hostport string) error {
	host, port := hostport, ""
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return fmt.Errorf("port %q is not a number from 1 to 65535", port)
		}
	} else if strings.Contains(hostport, ":") && !strings.HasPrefix(hostport, "[") {
		return fmt.Errorf("host %q is not host[:port]", hostport)
	}
	if strings.HasPrefix(host, "[") || net.ParseIP(host) != nil {
		if ip := net.ParseIP(strings.Trim(host, "[]")); ip == nil {
			return fmt.Errorf("host %q is not a valid IP address", host)
		}
		return nil
	}
	if host != strings.ToLower(host) {
		return fmt.Errorf("write the host in lower case (%s)", strings.ToLower(hostport))
	}
	if len(host) > 253 {
		return fmt.Errorf("host name is longer than 253 characters")
	}
	for label := range strings.SplitSeq(host, ".") {
		if !hostLabel.MatchString(label) {
			return fmt.Errorf("host %q is not a valid host name", host)
		}
	}
	return nil
}

func launcherWhat(host string) string {
	switch host {
	case "npx":
		return "npm package"
	case "uvx":
		return "Python package"
	}
	return "command"
}

func launcherExample(host string) string {
	switch host {
	case "npx":
		return "@modelcontextprotocol/server-filesystem"
	case "uvx":
		return "mcp-server-fetch"
	}
	return "bin/my-server"
}
