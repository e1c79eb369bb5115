// Package gen writes synthetic Lush projects of a chosen size, for benchmarks: N agents, each
// with a few tools, loops, service accounts and tool grants spread over users and groups.
package gen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Size sets how big a generated project is.
type Size struct {
	Agents int
	Loops  int
	Grants int
	Tools  int // distinct MCP servers (default Agents/2)
}

// Write creates the project in dir (which must exist) and returns nothing but errors.
func Write(dir string, s Size) error {
	if s.Tools == 0 {
		s.Tools = max(1, s.Agents/2)
	}
	var lush strings.Builder
	lush.WriteString("project: generated\nservice_accounts:\n")
	for i := range max(1, s.Loops/10) {
		fmt.Fprintf(&lush, "  - name: bot-%d\n", i)
	}
	lush.WriteString("tool_classes:\n")
	for i := range s.Tools {
		fmt.Fprintf(&lush, "  %s:\n    read_item: read\n    list_items: read\n    write_item: {access: write, risk: write}\n", toolRef(i))
	}
	lush.WriteString("tool_grants:\n")
	perTool := s.Grants / s.Tools
	for i := range s.Tools {
		fmt.Fprintf(&lush, "  - tool: %s\n    grants:\n", toolRef(i))
		for j := range perTool {
			switch j % 4 {
			case 0:
				fmt.Fprintf(&lush, "      - {principal: group:team-%d, access: read}\n", (i+j)%200)
			case 1:
				fmt.Fprintf(&lush, "      - {principal: user:user-%d, access: write}\n", i*perTool+j)
			case 2:
				fmt.Fprintf(&lush, "      - {principal: user:user-%d, access: write, tools: [write_item]}\n", i*perTool+j)
			default:
				fmt.Fprintf(&lush, "      - {principal: serviceaccount:bot-%d, access: write}\n", j%max(1, s.Loops/10))
			}
		}
	}
	if err := write(dir, "lush.yaml", lush.String()); err != nil {
		return err
	}
	for i := range s.Agents {
		var a strings.Builder
		fmt.Fprintf(&a, "name: %s\nmodel: gemini-2.5-flash\ndescription: Agent number %d.\ntools:\n", AgentName(i), i)
		for k := range 3 {
			fmt.Fprintf(&a, "  - server: %s\n    access: %s\n", toolRef((i+k)%s.Tools), []string{"read", "write", "read"}[k])
		}
		if i > 0 {
			fmt.Fprintf(&a, "  - server: lush://%s\n    access: read\n", AgentName(i-1))
		}
		fmt.Fprintf(&a, "acl:\n  - principal: group:team-%d\n    role: execute\n  - principal: group:everyone\n    role: execute\n", i%200)
		if err := write(dir, filepath.Join("agents", AgentName(i), "spec.yaml"), a.String()); err != nil {
			return err
		}
	}
	for i := range s.Loops {
		l := fmt.Sprintf("name: loop-%d\nschedule: \"%d * * * *\"\nagent: %s\nrun_as: serviceaccount:bot-%d\ninstruction: Do task %d.\nacl:\n  - principal: group:ops\n    role: execute\n",
			i, i%60, AgentName(i%s.Agents), i%max(1, s.Loops/10), i)
		if err := write(dir, filepath.Join("loops", fmt.Sprintf("loop-%d.yaml", i)), l); err != nil {
			return err
		}
	}
	return nil
}

// AgentName names generated agent i.
func AgentName(i int) string { return fmt.Sprintf("agent-%d", i) }

// ToolRef names generated MCP server i.
func ToolRef(i int) string { return toolRef(i) }

func toolRef(i int) string { return fmt.Sprintf("mcp://tools-%d.internal/mcp", i) }

func write(dir, rel, content string) error {
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o644)
}
