package compiler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/toolref"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/vault"
)

// maxParallelReach bounds how many servers are checked at once.
const maxParallelReach = 4

// checkReachability connects to every MCP server an agent uses, lists its tools, and checks the
// named tools and classes against what the server offers; and fetches and checks the Agent Card
// of every remote A2A agent an agent uses.
func (b *build) checkReachability() {
	res := &upstream.Resolver{ProjectDir: b.p.Dir, NodePrefixes: b.opts.nodePrefixes}
	var servers, agents []*toolInfo
	for _, ref := range b.toolRefs() {
		switch ti := b.tools[ref]; ti.ref.Kind {
		case toolref.MCP:
			servers = append(servers, ti)
		case toolref.A2A:
			agents = append(agents, ti)
		}
	}
	if len(servers)+len(agents) == 0 {
		return
	}
	what := diag.Plural(len(servers), "MCP server")
	switch {
	case len(servers) == 0:
		what = diag.Plural(len(agents), "A2A agent")
	case len(agents) > 0:
		what += " and " + diag.Plural(len(agents), "A2A agent")
	}
	b.opts.progress(fmt.Sprintf("reaching %s (timeout %s each; --offline skips this)", what, b.opts.reachTimeout))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxParallelReach)
	for _, ti := range append(servers, agents...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if ti.ref.Kind == toolref.A2A {
				b.reachA2A(ti)
				return
			}
			b.reach(res, ti)
		}()
	}
	wg.Wait()
}

func (b *build) reach(res *upstream.Resolver, ti *toolInfo) {
	ctx, cancel := context.WithTimeout(b.ctx, b.opts.reachTimeout)
	defer cancel()
	t := b.mcpTool(ti)
	where := ti.first
	c, _, err := upstream.Dial(ctx, t, upstream.DialOptions{Resolver: res})
	if err == nil {
		defer c.Close()
		var tools []mcp.Tool
		tools, err = upstream.ListAllTools(ctx, c)
		if err == nil {
			b.opts.progress(fmt.Sprintf("  ✓ %s: %d tools", ti.ref, len(tools)))
			b.checkOffered(ti, tools)
			return
		}
	}
	if errors.Is(err, transport.ErrAuthorizationRequired) {
		if vault.Needs(b.declaredCredentials(), ti.ref.String()) {
			b.opts.progress(fmt.Sprintf("  ✓ %s: asks for a credential, as mcp_credentials declares (its tools are checked when the gateway connects)", ti.ref))
			return
		}
		b.opts.progress(fmt.Sprintf("  ⚠ %s: asks for a credential", ti.ref))
		b.l.WarnHint(where, "credential-needed", "declare one under mcp_credentials in lush.yaml (docs/credentials.md); calls will fail until then",
			"MCP server %s asks for a credential (401 Unauthorized), and mcp_credentials declares none for it", ti.ref)
		return
	}
	b.opts.progress(fmt.Sprintf("  ✗ %s", ti.ref))
	hint := "check that it is running, or build with --offline to skip this check"
	if t.Stdio != nil {
		hint = "check the command and its servers: entry in lush.yaml, or build with --offline to skip this check"
	}
	b.l.ErrorHint(where, "server-unreachable", hint, "MCP server %s is not reachable: %s", ti.ref, reachError(ctx, err, b.opts.reachTimeout.String()))
}

// declaredCredentials are lush.yaml's mcp_credentials in manifest form.
func (b *build) declaredCredentials() []manifest.Credential {
	var out []manifest.Credential
	for _, c := range b.cfg.Credentials {
		out = append(out, manifest.Credential{Tool: c.Tool.Value, Principal: c.Principal.Value, Type: c.Type.Value, Flow: c.Flow.Value})
	}
	return out
}

// reachError turns a connection failure into a short, stable explanation.
func reachError(ctx context.Context, err error, timeout string) string {
	var dns *net.DNSError
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "no answer within " + timeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &dns):
		return "unknown host " + dns.Name
	case errors.Is(err, os.ErrNotExist):
		return "command not found"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && len(msg)-i < 120 {
		// Keep the innermost cause: the rest repeats the reference and the operation.
		msg = msg[i+2:]
	}
	return msg
}

// checkOffered compares what agents name and classify with the tools the server offers.
func (b *build) checkOffered(ti *toolInfo, offered []mcp.Tool) {
	names := make([]string, 0, len(offered))
	readOnly := map[string]bool{}
	for _, t := range offered {
		names = append(names, t.Name)
		if t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint {
			readOnly[t.Name] = true
		}
	}
	slices.Sort(names)
	for _, u := range ti.uses {
		for _, nt := range u.entry.Only {
			if !slices.Contains(names, nt.Name.Value) {
				hint := diag.DidYouMean(nt.Name.Value, names)
				if hint == "" {
					hint = "the server offers: " + strings.Join(names, ", ")
				}
				b.l.ErrorHint(nt.Name.Pos, "unknown-server-tool", hint, "%s offers no tool %q", ti.ref, nt.Name.Value)
			}
		}
	}
	for name, c := range ti.classes {
		if name != "" && name != "*" && !slices.Contains(names, name) {
			b.l.WarnHint(c.pos, "unknown-server-tool", diag.DidYouMean(name, names), "%s classifies tool %q, which the server does not offer", ti.ref, name)
		}
	}
	// Tools a read-only agent can see but never call because nobody classified them.
	var unclassified, hinted []string
	for _, n := range names {
		if _, known := ti.classOf(n); !known && b.readOnlyUse(ti, n) {
			unclassified = append(unclassified, n)
			if readOnly[n] {
				hinted = append(hinted, n)
			}
		}
	}
	if len(unclassified) > 0 {
		hint := "classify them in lush.yaml tool_classes"
		if len(hinted) > 0 {
			hint += fmt.Sprintf("; the server marks %s read-only (readOnlyHint, a hint only)", strings.Join(hinted, ", "))
		}
		b.l.WarnHint(ti.first, "unclassified-tools", hint,
			"%s of %s without a class count as write, so agents with read access cannot call them: %s", diag.Plural(len(unclassified), "tool"), ti.ref, strings.Join(unclassified, ", "))
	}
}

// readOnlyUse reports whether some agent may use tool name of ti at read access only.
func (b *build) readOnlyUse(ti *toolInfo, name string) bool {
	return slices.ContainsFunc(ti.uses, func(u toolUse) bool { return u.entry.Access.Value == "read" && admits(u.entry, name) })
}
