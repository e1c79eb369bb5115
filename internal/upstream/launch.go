// Package upstream starts and connects to the MCP servers a build names: stdio servers that Lush
// launches (mcp://npx/…, mcp://uvx/…, mcp://stdio/…) and remote servers over streamable HTTP or
// SSE. The build's reachability check and the gateway both connect through it, so a server that
// passes the build starts the same way in production.
//
// It speaks every protocol version a server may: 2026-07-28 where the server offers it (each
// request carrying its metadata, notifications on a subscriptions/listen stream), the handshake
// versions otherwise. The requests a server sends to its client during a call (sampling,
// elicitation, roots) are answered by that call's Asker (WithAsker).
//
// A stdio server runs in the project directory with an explicit, minimal environment: the
// variables of its servers: entry plus a short list needed to find programs. It never inherits
// the gateway's own environment, which holds credentials.
package upstream

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lush-agents/lush/internal/manifest"
)

// passEnv are the variables of Lush's own environment that a stdio server receives, so that it
// can find its interpreter and a home and temp directory. Nothing else is inherited.
var passEnv = []string{"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "USER", "NODE_PATH", "npm_config_cache"}

// Command is how to start a stdio server.
type Command struct {
	Path string   // program: absolute, or looked up on PATH
	Args []string // arguments after the program
	Dir  string   // working directory (the project directory)
	Env  []string // complete environment, KEY=value
}

// String renders the command for messages, e.g. "npx -y @modelcontextprotocol/server-filesystem ./data".
func (c Command) String() string {
	return strings.Join(append([]string{filepath.Base(c.Path)}, c.Args...), " ")
}

// Resolver turns a manifest's stdio servers into commands.
type Resolver struct {
	// ProjectDir is where stdio servers run and where mcp://stdio/<path> commands are found.
	ProjectDir string
	// NodePrefixes are directories holding node_modules (npm install --prefix <dir>). A package
	// installed there is run with node directly, without npx and without the network.
	NodePrefixes []string
}

// Command resolves the command that starts s.
func (r *Resolver) Command(s *manifest.Stdio) (Command, error) {
	c := Command{Dir: r.ProjectDir, Env: r.env(s)}
	switch s.Launcher {
	case "npx":
		if bin, ok := r.installedNodeBin(s.Package); ok {
			node, err := exec.LookPath("node")
			if err != nil {
				return Command{}, fmt.Errorf("start %s: node is not on PATH", s.Package)
			}
			c.Path, c.Args = node, append([]string{bin}, s.Args...)
			return c, nil
		}
		npx, err := exec.LookPath("npx")
		if err != nil {
			return Command{}, fmt.Errorf("start %s: npx is not on PATH (install Node.js, or install the package with npm install --prefix and pass its directory)", s.Package)
		}
		c.Path, c.Args = npx, append([]string{"-y", s.Package}, s.Args...)
	case "uvx":
		uvx, err := exec.LookPath("uvx")
		if err != nil {
			return Command{}, fmt.Errorf("start %s: uvx is not on PATH (install uv)", s.Package)
		}
		c.Path, c.Args = uvx, append([]string{s.Package}, s.Args...)
	case "stdio":
		path, err := r.lookCommand(s.Package)
		if err != nil {
			return Command{}, err
		}
		c.Path, c.Args = path, slices.Clone(s.Args)
	default:
		return Command{}, fmt.Errorf("unknown launcher %q", s.Launcher)
	}
	return c, nil
}

// lookCommand finds mcp://stdio/<command>: a path with a slash is inside the project; a bare
// name is looked up in the project, then on PATH.
func (r *Resolver) lookCommand(name string) (string, error) {
	local := filepath.Join(r.ProjectDir, filepath.FromSlash(name))
	if st, err := os.Stat(local); err == nil && !st.IsDir() {
		if st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not executable (chmod +x %s)", name, name)
		}
		return local, nil
	}
	if strings.Contains(name, "/") {
		return "", fmt.Errorf("%s does not exist in the project", name)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not in the project and not on PATH", name)
	}
	return path, nil
}

// installedNodeBin finds an npm package installed under one of the node prefixes and returns its
// executable. A version pin must match the installed version.
func (r *Resolver) installedNodeBin(pkg string) (string, bool) {
	name, version := splitNPM(pkg)
	for _, prefix := range r.NodePrefixes {
		dir := filepath.Join(prefix, "node_modules", filepath.FromSlash(name))
		data, err := os.ReadFile(filepath.Join(dir, "package.json"))
		if err != nil {
			continue
		}
		var meta struct {
			Version string          `json:"version"`
			Bin     json.RawMessage `json:"bin"`
		}
		if json.Unmarshal(data, &meta) != nil || (version != "" && version != meta.Version) {
			continue
		}
		if bin := pickBin(name, meta.Bin); bin != "" {
			return filepath.Join(dir, filepath.FromSlash(bin)), true
		}
	}
	return "", false
}

// splitNPM splits "@scope/name@1.2.3" into "@scope/name" and "1.2.3".
func splitNPM(pkg string) (name, version string) {
	at := strings.LastIndex(pkg, "@")
	if at <= 0 {
		return pkg, ""
	}
	return pkg[:at], pkg[at+1:]
}

// pickBin chooses the executable of a package.json "bin": a string, or the entry named after
// the package, or the only entry.
func pickBin(name string, raw json.RawMessage) string {
	var single string
	if json.Unmarshal(raw, &single) == nil {
		return single
	}
	var bins map[string]string
	if json.Unmarshal(raw, &bins) != nil || len(bins) == 0 {
		return ""
	}
	base := name[strings.LastIndex(name, "/")+1:]
	if b, ok := bins[base]; ok {
		return b
	}
	if len(bins) == 1 {
		for _, b := range bins {
			return b
		}
	}
	keys := make([]string, 0, len(bins))
	for k := range bins {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return bins[keys[0]]
}

// MinimalEnv is the part of Lush's own environment that processes it starts (stdio servers, local
// tools) receive: enough to find programs, a home and a temp directory; never credentials.
func MinimalEnv() []string {
	var env []string
	for _, k := range passEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func (r *Resolver) env(s *manifest.Stdio) []string {
	env := MinimalEnv()
	for _, e := range s.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	return env
}
