package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/spf13/cobra"
)

type mcpFlags struct {
	apiKey, token, output string
	timeout               time.Duration
}

func (f *mcpFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.apiKey, "api-key", "", "send this API key (X-API-Key); default $LUSH_API_KEY")
	cmd.Flags().StringVar(&f.token, "token", "", "send this bearer token; default $LUSH_TOKEN")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 60*time.Second, "give up after this long")
	outputFlag(cmd, &f.output)
}

// connect opens an MCP session with an endpoint (streamable HTTP).
func (f *mcpFlags) connect(ctx context.Context, endpoint string) (*client.Client, error) {
	headers := map[string]string{}
	key, token := f.apiKey, f.token
	if key == "" {
		key = os.Getenv("LUSH_API_KEY")
	}
	if token == "" {
		token = os.Getenv("LUSH_TOKEN")
	}
	if key != "" {
		headers["X-API-Key"] = key
	}
	if token != "" {
		headers["Authorization"] = "Bearer " + token
	}
	c, err := client.NewStreamableHttpClient(endpoint, transport.WithHTTPHeaders(headers))
	if err != nil {
		return nil, usage("%v", err)
	}
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2025-11-25",
		ClientInfo: mcp.Implementation{Name: "lushctl", Version: buildVersion()}}}); err != nil {
		c.Close()
		return nil, fmt.Errorf("initialize %s: %w", endpoint, err)
	}
	return c, nil
}

func newMCPCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "A small MCP client: list and call the tools of an endpoint",
		Long: `The mcp commands talk to any MCP endpoint over streamable HTTP, such as a gateway's
/agents/<name>/mcp, as the principal of an API key or bearer token (or, against a gateway in
--dev mode, without credentials).`,
	}
	cmd.AddCommand(newMCPToolsCmd(), newMCPCallCmd())
	return cmd
}

func newMCPToolsCmd() *cobra.Command {
	var f mcpFlags
	cmd := &cobra.Command{
		Use:     "tools <endpoint>",
		Short:   "List the tools an endpoint offers you",
		Example: `  lushctl mcp tools http://127.0.0.1:8080/agents/researcher/mcp --api-key $KEY`,
		Args:    args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			c, err := f.connect(ctx, a[0])
			if err != nil {
				return err
			}
			defer c.Close()
			res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil {
				return fmt.Errorf("tools/list: %w", err)
			}
			if f.output == "json" {
				return writeJSON(cmd.OutOrStdout(), res.Tools)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOOL\tDESCRIPTION")
			for _, t := range res.Tools {
				desc, _, _ := strings.Cut(t.Description, "\n")
				if len(desc) > 80 {
					desc = desc[:77] + "..."
				}
				fmt.Fprintf(tw, "%s\t%s\n", t.Name, desc)
			}
			return tw.Flush()
		},
	}
	f.register(cmd)
	return cmd
}

func newMCPCallCmd() *cobra.Command {
	var f mcpFlags
	var argsJSON string
	cmd := &cobra.Command{
		Use:   "call <endpoint> <tool>",
		Short: "Call a tool and print its result",
		Long: `Call calls one tool and prints its text content (or, with -o json, the whole result).
Exits 1 when the result is an error, such as a denial (a stub is a success), so scripts can tell.`,
		Example: `  lushctl mcp call http://127.0.0.1:8080/agents/researcher/mcp read_text_file --args '{"path":"data/q3.md"}'`,
		Args:    args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			var toolArgs map[string]any
			if argsJSON != "" {
				if err := json.Unmarshal([]byte(argsJSON), &toolArgs); err != nil {
					return usage("--args must be a JSON object: %v", err)
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			c, err := f.connect(ctx, a[0])
			if err != nil {
				return err
			}
			defer c.Close()
			res, err := c.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: a[1], Arguments: toolArgs}})
			if err != nil {
				return failed("tools/call %s: %v", a[1], err)
			}
			if f.output == "json" {
				if err := writeJSON(cmd.OutOrStdout(), res); err != nil {
					return err
				}
			} else {
				for _, content := range res.Content {
					switch c := content.(type) {
					case mcp.TextContent:
						fmt.Fprintln(cmd.OutOrStdout(), c.Text)
					default:
						b, _ := json.Marshal(c)
						fmt.Fprintln(cmd.OutOrStdout(), string(b))
					}
				}
			}
			if res.IsError {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&argsJSON, "args", "", "the tool's arguments as a JSON object")
	f.register(cmd)
	return cmd
}
