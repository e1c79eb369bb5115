package vault

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// DefaultPath is the path template of secrets in Vault unless the gateway config
// (credentials.vault.path) or the declaration in lush.yaml (mcp_credentials … vault:) sets one. It
// is a KV v2 path under the mount "secret".
const DefaultPath = "secret/data/lush/{project}/{server}/{principal}"

// TemplateVars are the variables a path template may use.
var TemplateVars = []string{"project", "server", "principal", "principal_kind", "principal_name", "type"}

var (
	templateVar = regexp.MustCompile(`\{([^{}]*)\}`)
	unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._@/-]`)
)

// Target is what a path template is rendered for.
type Target struct {
	Project   string
	Tool      string // the MCP server reference
	Principal string // kind:name
	Type      string // the credential type
}

// CheckTemplate reports unknown variables and unbalanced braces in a path template.
func CheckTemplate(t string) error {
	if strings.TrimSpace(t) == "" {
		return fmt.Errorf("the path template is empty")
	}
	for _, m := range templateVar.FindAllStringSubmatch(t, -1) {
		if !slices.Contains(TemplateVars, m[1]) {
			return fmt.Errorf("unknown variable {%s} in path template %q: use %s", m[1], t, varList())
		}
	}
	if rest := templateVar.ReplaceAllString(t, ""); strings.ContainsAny(rest, "{}") {
		return fmt.Errorf("unbalanced brace in path template %q", t)
	}
	if strings.HasPrefix(t, "/") {
		return fmt.Errorf("path template %q must not start with /: write it as Vault's CLI does, e.g. %s", t, DefaultPath)
	}
	return nil
}

func varList() string {
	var vs []string
	for _, v := range TemplateVars {
		vs = append(vs, "{"+v+"}")
	}
	return strings.Join(vs, ", ")
}

// Render fills a path template. Values are made path-safe: characters other than letters,
// digits and . _ @ / - become _ (so "mcp://npx/@acme/server#work" gives the server
// "npx/@acme/server_work", and the model key "model://openai" gives "model/openai"). A result with an empty, "." or ".." segment is refused.
func Render(t string, to Target) (string, error) {
	if err := CheckTemplate(t); err != nil {
		return "", err
	}
	kind, name, _ := strings.Cut(to.Principal, ":")
	server := strings.TrimPrefix(to.Tool, "mcp://")
	if key, ok := strings.CutPrefix(to.Tool, "model://"); ok {
		server = "model/" + key // a model provider's API key (docs/running.md#model-providers)
	}
	vals := map[string]string{
		"project":        to.Project,
		"server":         server,
		"principal":      kind + "/" + name,
		"principal_kind": kind,
		"principal_name": name,
		"type":           to.Type,
	}
	out := templateVar.ReplaceAllStringFunc(t, func(m string) string {
		return unsafeChars.ReplaceAllString(vals[m[1:len(m)-1]], "_")
	})
	for seg := range strings.SplitSeq(out, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("path template %q gives %q for %s on %s, which has an empty or relative segment", t, out, to.Principal, to.Tool)
		}
	}
	return out, nil
}

// kvWriteHint is the Vault CLI command that writes a secret at a logical path, for messages:
// KV v2 paths ("<mount>/data/<path>") use `vault kv put -mount=<mount> <path>`.
func kvWriteHint(path string, fields []string) string {
	args := make([]string, len(fields))
	for i, f := range fields {
		args[i] = f + "=…"
	}
	if mount, rest, ok := strings.Cut(path, "/data/"); ok && !strings.Contains(mount, "/") {
		return fmt.Sprintf("vault kv put -mount=%s %s %s", mount, rest, strings.Join(args, " "))
	}
	return fmt.Sprintf("vault write %s %s", path, strings.Join(args, " "))
}
