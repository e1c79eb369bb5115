package notes

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// maxNoteLen is the longest note post_note accepts, in characters.
const maxNoteLen = 10_000

// searchResult is search_notes' structured content.
type searchResult struct {
	Account string   `json:"account"`
	Notes   []string `json:"notes"`
}

// newMCPServer returns the MCP server with the three tools.
func (s *Server) newMCPServer() *server.MCPServer {
	m := server.NewMCPServer("notes", "1.0.0",
		server.WithToolCapabilities(false),
		server.WithOutputSchemaValidation(),
		server.WithRecovery(),
	)
	m.AddTool(mcp.NewTool("search_notes",
		mcp.WithDescription("Search the caller's notes. Without a query, list them all."),
		mcp.WithString("query", mcp.Description("Text the notes must contain (case-insensitive).")),
		mcp.WithOutputSchema[searchResult](),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), withAccount(s.searchNotes))
	m.AddTool(mcp.NewTool("post_note",
		mcp.WithDescription("Add a note to the caller's notes."),
		mcp.WithString("text", mcp.Required(), mcp.MaxLength(maxNoteLen), mcp.Description("The note.")),
		mcp.WithReadOnlyHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(false),
		mcp.WithOpenWorldHintAnnotation(false),
	), withAccount(s.postNote))
	m.AddTool(mcp.NewTool("whoami",
		mcp.WithDescription("Return the account the caller's bearer token belongs to."),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), withAccount(func(_ context.Context, account string, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(account), nil
	}))
	return m
}

// accountHandler is a tool handler told which account is calling.
type accountHandler func(ctx context.Context, account string, req mcp.CallToolRequest) (*mcp.CallToolResult, error)

// withAccount adapts h to mcp-go, taking the account from the context the auth middleware set.
func withAccount(h accountHandler) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		account, _ := ctx.Value(accountKey{}).(string)
		if account == "" { // cannot happen behind authenticate; refuse rather than guess
			return mcp.NewToolResultError("no authenticated account"), nil
		}
		return h(ctx, account, req)
	}
}

func (s *Server) searchNotes(_ context.Context, account string, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	query := req.GetString("query", "")
	found := []string{} // never nil: the output schema wants an array
	for _, note := range s.notesOf(account) {
		if strings.Contains(strings.ToLower(note), strings.ToLower(query)) {
			found = append(found, note)
		}
	}
	if len(found) == 0 {
		text := fmt.Sprintf("no notes of %s match %q", account, query)
		return mcp.NewToolResultStructured(searchResult{Account: account, Notes: found}, text), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "notes of %s matching %q:", account, query)
	for _, note := range found {
		b.WriteString("\n- " + note)
	}
	return mcp.NewToolResultStructured(searchResult{Account: account, Notes: found}, b.String()), nil
}

func (s *Server) postNote(_ context.Context, account string, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text, err := req.RequireString("text")
	switch {
	case err != nil:
		return mcp.NewToolResultError("post_note needs a text argument (a string)"), nil
	case strings.TrimSpace(text) == "":
		return mcp.NewToolResultError("post_note: the text is empty"), nil
	case utf8.RuneCountInString(text) > maxNoteLen:
		return mcp.NewToolResultErrorf("post_note: the text is %d characters long; the limit is %d",
			utf8.RuneCountInString(text), maxNoteLen), nil
	}
	s.mu.Lock()
	s.notes[account] = append(s.notes[account], text)
	n := len(s.notes[account])
	s.mu.Unlock()
	return mcp.NewToolResultText(fmt.Sprintf("posted note %d for %s", n, account)), nil
}
