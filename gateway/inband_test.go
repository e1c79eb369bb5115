package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/policies/approval"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// inbandHarness serves builtin/shell live (touch allowed), every call of it needing approval, with
// the approval page's public base URL set and calls that wait for wait.
func inbandHarness(t *testing.T, wait time.Duration) (*harness, *decisionlog.Approvals) {
	t.Helper()
	cfg := gateway.Config{Builtins: gateway.BuiltinsConfig{Shell: gateway.ShellConfig{Mode: "allowlist", Allowed: []string{"touch"}}},
		Approvals: approval.Config{Wait: wait, Poll: 5 * time.Millisecond}}
	cfg.LiveWrites.Tools = []string{"builtin/shell"}
	cfg.Auth.ResourceURL = "https://lush.example/base"
	var store *decisionlog.Approvals
	h := shellHarness(t, cfg, nil, func(o *gateway.Options) {
		var err error
		if store, err = decisionlog.OpenApprovals(o.Policy.Log().Path()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		o.Approvals = store
	})
	return h, store
}

// mrtrCall sends a 2026-07-28 tools/call of the shell, as a stateless request, as the principal
// of key, with the client capabilities caps and extra params (requestState, inputResponses); it
// returns the result, or the JSON-RPC error.
func mrtrCall(t *testing.T, h *harness, key, caps, cmd string, extra map[string]any) (map[string]any, *mcphttp.Error) {
	t.Helper()
	p := map[string]any{"name": "shell", "arguments": map[string]any{"cmd": cmd},
		"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": gateway.ProtocolMRTR,
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "test", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": json.RawMessage(caps)}}
	for k, v := range extra {
		p[k] = v
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": p})
	resp, out := h.post("assistant", string(body), map[string]string{"X-API-Key": key, "MCP-Protocol-Version": gateway.ProtocolMRTR,
		"Mcp-Method": "tools/call", "Mcp-Name": "shell"})
	if e, ok := out["error"].(map[string]any); ok {
		code, _ := e["code"].(float64)
		msg, _ := e["message"].(string)
		return nil, &mcphttp.Error{Code: int(code), Message: msg}
	}
	res, ok := out["result"].(map[string]any)
	if !ok {
		t.Fatalf("tools/call: %s %v", resp.Status, out)
	}
	return res, nil
}

const urlCaps = `{"elicitation": {"url": {}}}`

// inputRequired checks res is an input_required result pointing at the page of a pending
// approval of builtin/shell by alice, and returns the approval's id and the requestState.
func inputRequired(t *testing.T, res map[string]any, store *decisionlog.Approvals) (string, string) {
	t.Helper()
	if res["resultType"] != "input_required" {
		t.Fatalf("not input_required: %v", res)
	}
	req, _ := res["inputRequests"].(map[string]any)[gateway.ApprovalInputKey].(map[string]any)
	params, _ := req["params"].(map[string]any)
	id, _ := res["_meta"].(map[string]any)["dev.lush/approval"].(map[string]any)["id"].(string)
	decision, _ := res["_meta"].(map[string]any)["dev.lush/decision"].(map[string]any)["id"].(string)
	state, _ := res["requestState"].(string)
	if req["method"] != "elicitation/create" || params["mode"] != "url" || params["url"] != "https://lush.example/base/approvals/"+id+"/page" ||
		params["elicitationId"] != decision || decision == "" ||
		!strings.Contains(params["message"].(string), "needs a person's approval") || state == "" {
		t.Fatalf("input request: %v, state %q", req, state)
	}
	ap, err := store.Get(context.Background(), id)
	if err != nil || ap.Status != decisionlog.ApprovalPending || ap.Principal != "user:alice" || ap.Tool != "builtin/shell" {
		t.Fatalf("approval %s: %+v %v", id, ap, err)
	}
	return id, state
}

func retry(state, action string) map[string]any {
	return map[string]any{"requestState": state, "inputResponses": map[string]any{gateway.ApprovalInputKey: map[string]any{"action": action}}}
}

func resultText(res map[string]any) string {
	b, _ := json.Marshal(res["content"])
	return string(b)
}

// TestInputRequiredApproval: a 2026-07-28 client that declares URL elicitation is answered
// input_required at once, pointing at the approval's page; its retry with the signed
// requestState runs the call once a person approved exactly that call, is asked again while the
// approval is pending, and is refused once the approval is used, denied, or the user declined.
func TestInputRequiredApproval(t *testing.T) {
	h, store := inbandHarness(t, 20*time.Millisecond)
	created := filepath.Join(h.dir, "created")

	res, rpcErr := mrtrCall(t, h, aliceKey, urlCaps, "touch created", nil)
	if rpcErr != nil {
		t.Fatal(rpcErr)
	}
	id, state := inputRequired(t, res, store)
	// A repeat while it is pending joins the approval, with an elicitation of its own.
	res, _ = mrtrCall(t, h, aliceKey, urlCaps, "touch created", nil)
	if joined, _ := inputRequired(t, res, store); joined != id {
		t.Errorf("a repeat asked for approval %s, not %s", joined, id)
	}
	if elicited := res["inputRequests"].(map[string]any)[gateway.ApprovalInputKey].(map[string]any)["params"].(map[string]any)["elicitationId"]; elicited == id {
		t.Errorf("a repeat's elicitation has the first attempt's id %v", elicited)
	}

	// Retries whose state does not fit are refused before anything is decided.
	for _, tc := range []struct {
		name, cmd, state, key string
		want                  string
	}{
		{"tampered", "touch created", state[:len(state)-3] + "AAA", aliceKey, "altered"},
		{"another caller", "touch created", state, bobKey, "another caller"},
		{"another call", "touch other", state, aliceKey, "another call"},
		{"not ours, cut", "touch created", "lush-approval.v1.xyz", aliceKey, "not one this gateway issued"},
	} {
		_, rpc := mrtrCall(t, h, tc.key, urlCaps, tc.cmd, retry(tc.state, "accept"))
		if rpc == nil || rpc.Code != mcphttp.CodeInvalidParams || !strings.Contains(rpc.Message, "requestState: ") || !strings.Contains(rpc.Message, tc.want) {
			t.Errorf("%s: %v", tc.name, rpc)
		}
	}

	// Pending: asked again (after the wait), for the same approval.
	res, _ = mrtrCall(t, h, aliceKey, urlCaps, "touch created", retry(state, "accept"))
	if again, _ := inputRequired(t, res, store); again != id {
		t.Errorf("a pending retry asked for approval %s, not %s", again, id)
	}
	// Declined: refused, nothing asked.
	res, _ = mrtrCall(t, h, aliceKey, urlCaps, "touch created", retry(state, "decline"))
	if res["isError"] != true || !strings.Contains(resultText(res), "No one decided approval "+id) {
		t.Errorf("declined: %v", res)
	}
	if _, err := os.Stat(created); err == nil {
		t.Fatal("the command ran before it was approved")
	}

	// Approved: the retry runs, once.
	if _, err := store.Decide(context.Background(), id, true, "user:bob", "ok", "d-1"); err != nil {
		t.Fatal(err)
	}
	res, _ = mrtrCall(t, h, aliceKey, urlCaps, "touch created", retry(state, "accept"))
	if sc, _ := res["structuredContent"].(map[string]any); sc["ok"] != true {
		t.Fatalf("the approved retry: %v", res)
	}
	if _, err := os.Stat(created); err != nil {
		t.Fatalf("the approved command did not run: %v", err)
	}
	res, _ = mrtrCall(t, h, aliceKey, urlCaps, "touch created", retry(state, "accept"))
	if res["isError"] != true || !strings.Contains(resultText(res), "already been used") {
		t.Errorf("a second retry under the used approval: %v", res)
	}

	// Denied: the retry is refused, and no new approval is asked for.
	res, _ = mrtrCall(t, h, aliceKey, urlCaps, "touch denied", nil)
	id2, state2 := inputRequired(t, res, store)
	if _, err := store.Decide(context.Background(), id2, false, "user:bob", "not now", "d-2"); err != nil {
		t.Fatal(err)
	}
	res, _ = mrtrCall(t, h, aliceKey, urlCaps, "touch denied", retry(state2, "accept"))
	if res["isError"] != true || !strings.Contains(resultText(res), "user:bob denied approval "+id2) {
		t.Errorf("denied: %v", res)
	}
	if pending, _ := store.List(context.Background(), decisionlog.ApprovalFilter{Status: decisionlog.ApprovalPending}); len(pending) != 0 {
		t.Errorf("approvals pending after the refusals: %+v", pending)
	}

	// The log: every attempt decided; the run under lush.approval.granted; the asks completed
	// approval_pending.
	var run, asked int
	for _, r := range h.events(decisionlog.Filter{Tool: "builtin/shell", Action: "tools/call"}) {
		if slices.Contains(r.Event.Rules, "lush.approval.granted") {
			run++
		}
		if r.Completion != nil && r.Completion.Status == decisionlog.StatusApprovalPending {
			asked++
		}
	}
	if run != 1 || asked < 3 {
		t.Errorf("logged: %d runs under an approval, %d asks", run, asked)
	}
}

// TestInputRequiredNeedsURLElicitation: a 2026-07-28 client that does not declare elicitation in
// URL mode waits as before, and is told the approval is pending.
func TestInputRequiredNeedsURLElicitation(t *testing.T) {
	h, _ := inbandHarness(t, 20*time.Millisecond)
	for _, caps := range []string{`{}`, `{"elicitation": {}}`, `{"elicitation": {"form": {}}}`, `{"elicitation": {"url": true}}`} {
		res, rpcErr := mrtrCall(t, h, aliceKey, caps, "touch created", nil)
		if rpcErr != nil || res["resultType"] == "input_required" || res["isError"] != true || !strings.Contains(resultText(res), "No one decided approval") {
			t.Errorf("capabilities %s: %v %v", caps, res, rpcErr)
		}
	}
}

// elicitor answers elicitations with action, passing each request on.
type elicitor struct {
	action mcp.ElicitationResponseAction
	asked  chan mcp.ElicitationRequest
}

func (e *elicitor) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	e.asked <- req
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: e.action}}, nil
}

// urlElicitationClient connects alice with a 2025-11-25 client that declares URL elicitation and
// answers it with action; completed receives the ids of notifications/elicitation/complete.
func urlElicitationClient(t *testing.T, h *harness, action mcp.ElicitationResponseAction) (*client.Client, *elicitor, <-chan string) {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(h.srv.URL+"/agents/assistant/mcp", transport.WithHTTPHeaders(map[string]string{"X-API-Key": aliceKey}))
	if err != nil {
		t.Fatal(err)
	}
	e := &elicitor{action: action, asked: make(chan mcp.ElicitationRequest, 4)}
	c := client.NewClient(tr, client.WithElicitationHandler(e))
	completed := make(chan string, 4)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/elicitation/complete" {
			id, _ := n.Params.AdditionalFields["elicitationId"].(string)
			completed <- id
		}
	})
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2025-11-25",
		ClientInfo:   mcp.Implementation{Name: "inband-test", Version: "1"},
		Capabilities: mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapability{URL: &struct{}{}}}}}); err != nil {
		t.Fatal(err)
	}
	return c, e, completed
}

// TestElicitationApproval: a 2025-11-25 client that declares URL elicitation is sent an
// elicitation/create in URL mode for the approval's page while the call waits; approved there,
// the call runs and the client is told the elicitation is complete. A user who declines ends
// the wait: the call is refused, and the approval stays open.
func TestElicitationApproval(t *testing.T) {
	h, store := inbandHarness(t, 30*time.Second)
	for _, tc := range []struct {
		name   string
		action mcp.ElicitationResponseAction
		cmd    string
	}{
		{"accepted and approved", mcp.ElicitationResponseActionAccept, "touch approved"},
		{"declined", mcp.ElicitationResponseActionDecline, "touch declined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, e, completed := urlElicitationClient(t, h, tc.action)
			done := make(chan *mcp.CallToolResult, 1)
			go func() { done <- callTool(t, c, "shell", map[string]any{"cmd": tc.cmd}) }()
			req := <-e.asked
			p := req.Params
			ap, err := store.Get(context.Background(), p.ElicitationID)
			if err != nil || p.Mode != "url" || p.URL != "https://lush.example/base/approvals/"+ap.ID+"/page" || ap.Status != decisionlog.ApprovalPending {
				t.Fatalf("elicitation %+v for approval %+v (%v)", p, ap, err)
			}
			if tc.action != mcp.ElicitationResponseActionAccept {
				res := <-done
				if !res.IsError || !strings.Contains(text(res), "declined to open the page of approval "+ap.ID) {
					t.Errorf("declined: %s", text(res))
				}
				if ap, _ := store.Get(context.Background(), ap.ID); ap.Status != decisionlog.ApprovalPending {
					t.Errorf("the approval after a decline: %+v", ap)
				}
				return
			}
			if _, err := store.Decide(context.Background(), ap.ID, true, "user:bob", "ok", "d-1"); err != nil {
				t.Fatal(err)
			}
			res := <-done
			if got := structured(t, res); !got.OK {
				t.Fatalf("the approved call: %s", text(res))
			}
			// The notification came on the call's stream, before its result.
			select {
			case id := <-completed:
				if id != ap.ID {
					t.Errorf("elicitation complete for %q, want %q", id, ap.ID)
				}
			default:
				t.Error("no notifications/elicitation/complete before the result")
			}
			if _, err := os.Stat(filepath.Join(h.dir, "approved")); err != nil {
				t.Errorf("the approved command did not run: %v", err)
			}
		})
	}
}
