package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/lush-agents/lush/compiler/spec"
	"github.com/lush-agents/lush/internal/diag"
	"github.com/lush-agents/lush/internal/principal"
	"github.com/lush-agents/lush/internal/toolref"
	"github.com/lush-agents/lush/vault"
)

func newAuthCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Manage the local credentials the gateway injects into MCP servers",
		Long: `auth manages .lush/credentials.local: the credentials of people working on a laptop, which
the gateway injects into calls to MCP servers (headers for remote servers, environment for stdio
servers). Agents and models never see them. Service accounts' credentials come from Vault in
production (docs/credentials.md).

The file is JSON with mode 0600; the gateway refuses it if others can read it. Secrets are read
from a prompt or from standard input, never from the command line.`,
	}
	cmd.AddCommand(newAuthAddCmd(), newAuthListCmd(), newAuthRemoveCmd(), newAuthLoginCmd(), newAuthActorKeyCmd())
	return cmd
}

// authFlags are the flags every auth subcommand shares.
type authFlags struct {
	project, principal, output string
}

func (f *authFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.project, "project", "C", ".", "the project directory")
	cmd.Flags().StringVar(&f.principal, "principal", "", "whose credential (default user:<login>, the --dev principal of lushctl gateway)")
	outputFlag(cmd, &f.output)
}

func (f *authFlags) file() *vault.File {
	return vault.OpenFile(filepath.Join(f.project, filepath.FromSlash(vault.LocalFile)))
}

// target checks the output flag and returns the server and principal a command is about.
func (f *authFlags) target(server string) (toolref.Ref, string, error) {
	if err := checkOutput(f.output); err != nil {
		return toolref.Ref{}, "", err
	}
	ref, err := mcpServer(server)
	if err != nil {
		return ref, "", err
	}
	who, err := f.who()
	return ref, who, err
}

// who is the principal the command is about.
func (f *authFlags) who() (string, error) {
	p := f.principal
	if p == "" {
		p = "user:" + loginName()
	}
	if _, err := principal.Parse(p); err != nil {
		return "", usage("--principal: %v", err)
	}
	return p, nil
}

// loginName is the user's login, "dev" when unknown.
func loginName() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "dev"
}

// mcpServer checks a tool reference names an MCP server or an A2A agent, in its canonical
// spelling.
func mcpServer(s string) (toolref.Ref, error) {
	ref, err := toolref.Parse(s)
	if err != nil {
		return ref, usage("%v", err)
	}
	if ref.Kind != toolref.MCP && ref.Kind != toolref.A2A {
		return ref, usage("%s is not an MCP server or an A2A agent: only mcp:// servers and a2a:// agents receive credentials", s)
	}
	return ref, nil
}

// declarations reads lush.yaml's mcp_credentials, if the project has a lush.yaml.
func declarations(project string) ([]spec.Credential, error) {
	file := filepath.Join(project, "lush.yaml")
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	var l diag.List
	cfg := spec.ParseProjectConfig("lush.yaml", data, &l)
	if cfg == nil || l.HasErrors() {
		return nil, failed("%s has errors; run lushctl build %s to see them", file, project)
	}
	return cfg.Credentials, nil
}

// declFor is the declaration for who on tool: its own, else (as for a group's member, whose
// groups the command cannot know) the tool's group declarations when they all agree on the type.
// A declaration for another user or service account never applies to who.
func declFor(decls []spec.Credential, tool, who string) *spec.Credential {
	var forTool []*spec.Credential
	for i := range decls {
		if decls[i].Tool.Value != tool {
			continue
		}
		if decls[i].Principal.Value == who {
			return &decls[i]
		}
		if strings.HasPrefix(decls[i].Principal.Value, "group:") {
			forTool = append(forTool, &decls[i])
		}
	}
	for _, d := range forTool {
		if d.Type.Value != forTool[0].Type.Value {
			return nil
		}
	}
	if len(forTool) > 0 {
		return forTool[0]
	}
	return nil
}

func newAuthAddCmd() *cobra.Command {
	var f authFlags
	var typ, header, username string
	var env []string
	cmd := &cobra.Command{
		Use:   "add <mcp server>",
		Short: "Store a credential for an MCP server (the secret is read from a prompt or stdin)",
		Long: `add stores a credential for a principal on an MCP server in .lush/credentials.local,
replacing the one there was. The gateway picks it up at once (no restart).

The type defaults to the one lush.yaml declares for the server and principal (mcp_credentials):
  bearer, oauth  a token, sent as Authorization: Bearer <token>
  api_key        a key, sent in --header (default: the declared header, else X-API-Key)
  basic          --username, and a password, sent as Authorization: Basic
  env            environment variables of a stdio server (--env NAME, repeatable)

The secret is read without echo from the terminal, or from standard input when it is not a
terminal (one line; for several --env variables, one NAME=value line each). It is never taken
from the command line, where other users and shell history could see it.

A model provider's API key is stored at model://<provider> (or model://<credential> for a
lush.yaml models: entry that names one), for serviceaccount:agentd; agents read it at their
next request (docs/running.md#model-providers).`,
		Example: `  lushctl auth add mcp://notes.example.com/mcp --type bearer
  printf '%s' "$NOTES_TOKEN" | lushctl auth add mcp://notes.example.com/mcp --principal user:bob
  lushctl auth add mcp://uvx/mcp-server-github --type env --env GITHUB_TOKEN
  lushctl auth add mcp://tickets.example.com/mcp --type basic --username svc-tickets
  printf '%s' "$OPENAI_API_KEY" | lushctl auth add model://openai`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if isModelKey(a[0]) {
				if err := modelKeyTarget(&f, a[0], typ, header, username, env); err != nil {
					return err
				}
				return addModelKey(cmd, &f, a[0])
			}
			ref, who, err := f.target(a[0])
			if err != nil {
				return err
			}
			decls, err := declarations(f.project)
			if err != nil {
				return err
			}
			decl := declFor(decls, ref.String(), who)
			if typ == "" && decl != nil {
				typ = decl.Type.Value
			}
			if typ == "" {
				return usage("--type is required: lush.yaml declares no credential for %s on %s (use one of %s)", who, ref, strings.Join(vault.Types, ", "))
			}
			if !slices.Contains(vault.Types, typ) {
				return usage("--type %q is not one of %s", typ, strings.Join(vault.Types, ", "))
			}
			if decl != nil && decl.Type.Value != typ {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: lush.yaml declares %s for %s on %s; the gateway will refuse this %s one\n", vault.ACredential(decl.Type.Value), who, ref, typ)
			}
			if typ == vault.TypeEnv && len(env) == 0 && decl != nil {
				for _, e := range decl.Env {
					env = append(env, e.Value)
				}
			}
			if typ == vault.TypeAPIKey && header == "" && decl != nil {
				header = decl.Header.Value
			}
			if err := checkTypeFlags(typ, header, username, env, ref); err != nil {
				return err
			}
			c := vault.Credential{Type: typ, Header: header, Username: username}
			if err := readSecret(cmd, &c, env); err != nil {
				return err
			}
			if err := c.Check(); err != nil {
				return usage("%v", err)
			}
			file := f.file()
			replaced, err := file.Add(vault.FileEntry{Tool: ref.String(), Principal: who, Credential: c})
			if err != nil {
				return err
			}
			if len(decls) > 0 && !slices.ContainsFunc(decls, func(d spec.Credential) bool { return d.Tool.Value == ref.String() }) {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: lush.yaml declares no credential for %s; the gateway sends this one for %s all the same (declare it under mcp_credentials to make it required)\n", ref, who)
			}
			if f.output == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"tool": ref.String(), "principal": who, "type": typ, "file": file.Path(), "replaced": replaced})
			}
			verb := "added"
			if replaced {
				verb = "replaced"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s the %s credential of %s for %s in %s\n", verb, typ, who, ref, file.Path())
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&typ, "type", "", "credential type: bearer, oauth, api_key, basic or env (default: the declared type)")
	cmd.Flags().StringVar(&header, "header", "", "api_key: the header that carries the key")
	cmd.Flags().StringVar(&username, "username", "", "basic: the user name (the password is read like any secret)")
	cmd.Flags().StringArrayVar(&env, "env", nil, "env: a variable the server receives (repeatable; default: the declared ones)")
	return cmd
}

func checkTypeFlags(typ, header, username string, env []string, ref toolref.Ref) error {
	switch {
	case header != "" && typ != vault.TypeAPIKey:
		return usage("--header applies to --type api_key only")
	case username != "" && typ != vault.TypeBasic:
		return usage("--username applies to --type basic only")
	case typ == vault.TypeBasic && username == "":
		return usage("--type basic needs --username")
	case len(env) > 0 && typ != vault.TypeEnv:
		return usage("--env applies to --type env only")
	case typ == vault.TypeEnv && len(env) == 0:
		return usage("--type env needs --env NAME (the variables the server receives)")
	case ref.Stdio() && typ != vault.TypeEnv:
		return usage("%s is a stdio server: it receives credentials as environment variables (use --type env --env NAME)", ref)
	case (ref.Remote() || ref.Kind == toolref.A2A) && typ == vault.TypeEnv:
		return usage("%s is a remote server: it receives credentials in HTTP headers (use bearer, oauth, api_key or basic)", ref)
	}
	return nil
}

// readSecret fills the secret fields of c from the terminal (without echo) or from stdin.
func readSecret(cmd *cobra.Command, c *vault.Credential, env []string) error {
	in := cmd.InOrStdin()
	tty := false
	if fd, ok := in.(*os.File); ok && term.IsTerminal(int(fd.Fd())) {
		tty = true
	}
	prompt := func(label string) (string, error) {
		if tty {
			fd := int(in.(*os.File).Fd())
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: ", label)
			b, err := term.ReadPassword(fd)
			fmt.Fprintln(cmd.ErrOrStderr())
			if err != nil {
				return "", fmt.Errorf("read %s: %w", label, err)
			}
			return string(b), nil
		}
		return "", nil
	}
	var lines []string
	if !tty {
		var err error
		if lines, err = readLines(in); err != nil {
			return err
		}
	}
	one := func(label string) (string, error) {
		if tty {
			return prompt(label)
		}
		if len(lines) == 0 || lines[0] == "" {
			return "", usage("no %s on standard input: pipe it in (printf '%%s' \"$SECRET\" | lushctl auth add …) or run in a terminal", label)
		}
		return lines[0], nil
	}
	var err error
	switch c.Type {
	case vault.TypeBearer, vault.TypeOAuth:
		c.Token, err = one("token")
	case vault.TypeAPIKey:
		c.Key, err = one("API key")
	case vault.TypeBasic:
		c.Password, err = one("password for " + c.Username)
	case vault.TypeEnv:
		c.Env = map[string]string{}
		if tty || len(env) == 1 && len(lines) == 1 && !strings.HasPrefix(lines[0], env[0]+"=") {
			for _, name := range env {
				if c.Env[name], err = one(name); err != nil {
					return err
				}
			}
			return nil
		}
		for i, l := range lines {
			k, v, ok := strings.Cut(l, "=")
			if !ok || !slices.Contains(env, k) {
				return usage("standard input line %d: expected NAME=value for one of %s", i+1, strings.Join(env, ", "))
			}
			c.Env[k] = v
		}
		for _, name := range env {
			if _, ok := c.Env[name]; !ok {
				return usage("standard input has no %s=… line", name)
			}
		}
	}
	return err
}

// readLines reads stdin (at most 1 MiB), dropping a trailing newline from each line and blank lines.
func readLines(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(io.LimitReader(r, 1<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := strings.TrimRight(sc.Text(), "\r"); strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read standard input: %w", err)
	}
	return out, nil
}

// authRow is one line of auth list.
type authRow struct {
	Tool      string     `json:"tool"`
	Principal string     `json:"principal"`
	Type      string     `json:"type"`
	Detail    string     `json:"detail,omitempty"` // header, user name, variable names: never a secret
	Status    string     `json:"status"`           // configured, missing, vault
	Added     *time.Time `json:"added,omitempty"`
	Fix       string     `json:"fix,omitempty"`
}

func newAuthListCmd() *cobra.Command {
	var f authFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Show which credentials are configured, never their values",
		Long: `list shows the credentials of .lush/credentials.local and the declarations of lush.yaml
(mcp_credentials) that have none: for each, the server, the principal, the type and what is
sent (a header name, a user name, variable names), never a secret.

Status: configured (in the local file), missing (declared, nothing in the local file: the
command to add it is shown), vault (a service account's: the gateway reads it from Vault when
credentials.vault is configured, else from this file).`,
		Example: `  lushctl auth list
  lushctl auth list -C examples/quickstart -o json`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			entries, err := f.file().Entries()
			if err != nil {
				return err
			}
			decls, err := declarations(f.project)
			if err != nil {
				return err
			}
			var rows []authRow
			for _, e := range entries {
				added := e.Added
				d := detail(e.Credential)
				if isModelKey(e.Tool) {
					d = "model provider key"
				}
				rows = append(rows, authRow{Tool: e.Tool, Principal: e.Principal, Type: e.Credential.Type,
					Detail: d, Status: "configured", Added: &added})
			}
			for _, d := range decls {
				if slices.ContainsFunc(entries, func(e vault.FileEntry) bool { return e.Tool == d.Tool.Value && e.Principal == d.Principal.Value }) {
					continue
				}
				r := authRow{Tool: d.Tool.Value, Principal: d.Principal.Value, Type: d.Type.Value, Status: "missing"}
				switch {
				case d.Flow.Value == "token_exchange" || d.Flow.Value == "client_credentials":
					// Nothing is stored: the gateway obtains a token on each principal's behalf.
					r.Status = "obtained by the gateway"
					r.Detail = strings.ReplaceAll(d.Flow.Value, "_", " ")
				case d.Flow.Value == "authorization_code" && !strings.HasPrefix(d.Principal.Value, "group:"):
					r.Fix = fmt.Sprintf("lushctl auth login %s --principal %s --config <gateway config>", d.Tool.Value, d.Principal.Value)
				case d.Flow.Value == "authorization_code":
					r.Status = "per member"
					r.Fix = "each logs in: lushctl auth login " + d.Tool.Value + " --principal user:<name> --config <gateway config>"
				case strings.HasPrefix(d.Principal.Value, "group:"):
					r.Status = "per member"
					r.Fix = "each adds their own: lushctl auth add " + d.Tool.Value + " --principal user:<name>"
				case strings.HasPrefix(d.Principal.Value, "serviceaccount:"):
					r.Status = "vault"
					r.Fix = fmt.Sprintf("without Vault: lushctl auth add %s --principal %s", d.Tool.Value, d.Principal.Value)
				default:
					r.Fix = fmt.Sprintf("lushctl auth add %s --principal %s --type %s", d.Tool.Value, d.Principal.Value, d.Type.Value)
				}
				rows = append(rows, r)
			}
			if f.output == "json" {
				if rows == nil {
					rows = []authRow{}
				}
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			if len(rows) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "no credentials in %s, and lush.yaml declares none\n", f.file().Path())
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVER\tPRINCIPAL\tTYPE\tSENDS\tSTATUS")
			for _, r := range rows {
				status := r.Status
				if r.Fix != "" {
					status += " (" + r.Fix + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Tool, r.Principal, r.Type, orDash(r.Detail), status)
			}
			return tw.Flush()
		},
	}
	f.register(cmd)
	return cmd
}

// detail says what a credential sends, without its secret.
func detail(c vault.Credential) string {
	switch c.Type {
	case vault.TypeAPIKey:
		h := c.Header
		if h == "" {
			h = vault.DefaultAPIKeyHeader
		}
		return "header " + h
	case vault.TypeBasic:
		return "user " + c.Username
	case vault.TypeEnv:
		var names []string
		for k := range c.Env {
			names = append(names, k)
		}
		slices.Sort(names)
		return "env " + strings.Join(names, ", ")
	case vault.TypeOAuth:
		if c.Issuer != "" || c.RefreshToken != "" {
			d := "Authorization: Bearer; OAuth grant"
			if c.Issuer != "" {
				d += " from " + c.Issuer
			}
			if c.RefreshToken != "" {
				d += ", refreshable"
			}
			if !c.Expiry.IsZero() {
				d += ", access token until " + c.Expiry.UTC().Format(time.RFC3339)
			}
			return d
		}
	}
	return "Authorization: Bearer"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newAuthRemoveCmd() *cobra.Command {
	var f authFlags
	var config string
	cmd := &cobra.Command{
		Use:   "remove <mcp server>",
		Short: "Delete a credential from .lush/credentials.local",
		Long: `remove deletes the credential of a principal (default user:<login>) for an MCP server.
Exits 1 when there was none.

For an OAuth grant stored by auth login, give --config (the gateway config naming the client at
the server's authorization server): the refresh token is revoked there first (RFC 7009) when
the server offers revocation. A revocation that fails keeps the grant, so it can be retried.`,
		Example: `  lushctl auth remove mcp://notes.example.com/mcp
  lushctl auth remove mcp://notes.example.com/mcp --principal serviceaccount:digest-bot
  lushctl auth remove mcp://crm.example.com/mcp --principal user:alice --config gateway.yaml
  lushctl auth remove model://openai`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if isModelKey(a[0]) {
				return removeModelKey(cmd, &f, a[0])
			}
			ref, who, err := f.target(a[0])
			if err != nil {
				return err
			}
			file := f.file()
			revoked, err := revokeGrant(cmd, f.project, config, file, ref, who)
			if err != nil {
				return err
			}
			if revoked {
				fmt.Fprintf(cmd.ErrOrStderr(), "revoked the refresh token of %s for %s at its authorization server\n", who, ref)
			}
			removed, err := file.Remove(ref.String(), who)
			if err != nil {
				return err
			}
			if f.output == "json" {
				if err := writeJSON(cmd.OutOrStdout(), map[string]any{"tool": ref.String(), "principal": who, "removed": removed}); err != nil {
					return err
				}
			}
			if !removed {
				return failed("%s holds no credential of %s for %s", file.Path(), who, ref)
			}
			if f.output != "json" {
				fmt.Fprintf(cmd.OutOrStdout(), "removed the credential of %s for %s from %s\n", who, ref, file.Path())
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&config, "config", "", "the gateway config, to revoke a stored OAuth grant's refresh token (credentials.oauth.clients)")
	return cmd
}

// revokeGrant revokes the refresh token of a stored grant when --config is given and the entry
// holds one. It reports whether it revoked.
func revokeGrant(cmd *cobra.Command, project, config string, file *vault.File, ref toolref.Ref, who string) (bool, error) {
	entries, err := file.Entries()
	if err != nil {
		return false, err
	}
	i := slices.IndexFunc(entries, func(e vault.FileEntry) bool { return e.Tool == ref.String() && e.Principal == who })
	if i < 0 || entries[i].Credential.RefreshToken == "" {
		return false, nil
	}
	if config == "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "the stored grant has a refresh token; give --config to revoke it at the authorization server too\n")
		return false, nil
	}
	oc, r, err := oauthTarget(project, config, ref, who)
	if err != nil {
		return false, err
	}
	ok, err := oc.Revoke(cmd.Context(), r, entries[i].Credential.RefreshToken)
	if err != nil {
		return false, failed("revoke the refresh token (the grant is kept): %v", err)
	}
	if !ok {
		fmt.Fprintf(cmd.ErrOrStderr(), "the authorization server offers no revocation endpoint; the refresh token stays valid there until it expires\n")
	}
	return ok, nil
}
