package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// apiClient talks to one of a running server's HTTP APIs (the scheduler's /loops, /approvals):
// the server's URL and the caller's token come from flags or the environment, and answers map
// onto lushctl's exit codes.
type apiClient struct {
	url, token, output string
	api                string // the API, for messages: "the scheduler API"
}

func (c *apiClient) flags(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&c.url, "url", envOr("LUSH_URL", "http://127.0.0.1:"+envOr("PORT", "8080")),
		"the Lush server (lushctl run or serve); env LUSH_URL")
	cmd.PersistentFlags().StringVar(&c.token, "token", "", "bearer token (a JWT or an API key); default env LUSH_TOKEN")
	cmd.PersistentFlags().StringVarP(&c.output, "output", "o", "text", "output format: text or json")
}

// do sends a request and decodes the JSON answer into out; errors carry lushctl's exit codes.
func (c *apiClient) do(ctx context.Context, method, path string, body []byte, out any) error {
	if err := checkOutput(c.output); err != nil {
		return err
	}
	base := strings.TrimRight(c.url, "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usage("--url %q: give the server's address, such as http://127.0.0.1:8080", c.url)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return usage("--url: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	token := c.token
	if token == "" {
		token = os.Getenv("LUSH_TOKEN")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return &exitError{code: exitRuntime, msg: fmt.Sprintf("reach %s: %v (is lushctl run or serve running there?)", base, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return &exitError{code: exitRuntime, msg: fmt.Sprintf("read the answer of %s: %v", base, err)}
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct {
				Code       string `json:"code"`
				Message    string `json:"message"`
				DecisionID string `json:"decision_id"`
			} `json:"error"`
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
			if e.Error.DecisionID != "" {
				msg += " (decision " + e.Error.DecisionID + ")"
			}
		}
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusConflict:
			return failed("%s", msg)
		case http.StatusBadRequest:
			return usage("%s", msg)
		}
		return &exitError{code: exitRuntime, msg: fmt.Sprintf("%s answered %s: %s", base, resp.Status, msg)}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &exitError{code: exitRuntime, msg: fmt.Sprintf("%s answered something other than %s's JSON: %v", base, c.api, err)}
	}
	return nil
}
