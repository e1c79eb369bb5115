package gateway_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lush-agents/lush/gateway"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// TestSecretsNeverLeak makes calls with valid, wrong and forged credentials, and checks that no
// credential appears in the decision log's files, the gateway's log output, its metrics, its
// spans, or any answer.
func TestSecretsNeverLeak(t *testing.T) {
	h := start(t, gateway.Config{})
	const wrongKey = "wrong-key-that-must-not-leak-42"
	const forged = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ1c2VyOm1hbGxvcnkiLCJleHAiOjk5OTk5OTk5OTl9.Zm9yZ2VkLXNpZ25hdHVyZS1zZWNyZXQ"
	var answers []string
	alice := h.client("assistant", aliceKey)
	callTool(t, alice, "tests__echo", map[string]any{"text": "hello"})
	callTool(t, alice, "write_note", map[string]any{"text": "draft"})
	for _, hdr := range []map[string]string{
		{"X-API-Key": wrongKey},
		{"Authorization": "Bearer " + forged},
		{"Authorization": "Bearer " + wrongKey},
		{"Authorization": "Basic " + wrongKey},
	} {
		resp, body := h.post("assistant", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, hdr)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%v: status %d", hdr, resp.StatusCode)
		}
		answers = append(answers, strings.Join(resp.Header.Values("WWW-Authenticate"), " "), toString(body))
	}
	outputs := h.outputs()
	outputs["answers"] = strings.Join(answers, "\n")
	for where, out := range outputs {
		for _, secret := range []string{aliceKey, wrongKey, forged, "Zm9yZ2VkLXNpZ25hdHVyZS1zZWNyZXQ"} {
			if strings.Contains(out, secret) {
				t.Errorf("the %s contains a credential (%.12s…)", where, secret)
			}
		}
	}
}

// outputs closes the decision log and returns everything the gateway wrote or can be asked for:
// the decision log's files, its own log, its metrics and its spans.
func (h *harness) outputs() map[string]string {
	h.t.Helper()
	resp, err := http.Get(h.srv.URL + "/metrics")
	if err != nil {
		h.t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp, err = http.Get(h.srv.URL + "/health")
	if err != nil {
		h.t.Fatal(err)
	}
	health, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	h.log.Close()
	var files []string
	for _, f := range []string{h.logPath, h.logPath + "-wal"} {
		data, _ := os.ReadFile(f)
		files = append(files, string(data))
	}
	var spans []string
	for _, s := range h.spans.rec.Ended() {
		spans = append(spans, s.Name(), s.Status().Description)
		for _, a := range s.Attributes() {
			spans = append(spans, a.Value.String())
		}
		for _, e := range s.Events() {
			for _, a := range e.Attributes {
				spans = append(spans, a.Value.String())
			}
		}
	}
	return map[string]string{"decision log": strings.Join(files, ""), "gateway log": h.logs.String(),
		"metrics": string(metrics), "health": string(health), "spans": strings.Join(spans, "\n")}
}

func toString(m map[string]any) string {
	var b strings.Builder
	for k, v := range m {
		b.WriteString(k)
		b.WriteString("=")
		b.WriteString(strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(stringify(v), "\n", " "), "\t", " ")))
		b.WriteString(";")
	}
	return b.String()
}

func stringify(v any) string {
	switch x := v.(type) {
	case map[string]any:
		return toString(x)
	case string:
		return x
	default:
		return ""
	}
}

// TestMaskedArgumentsNeverStored deploys a project policy that masks a credential argument and
// checks that the argument reaches neither the decision log's files nor the logged event, while
// the rest of the input is logged and the event names what was removed.
func TestMaskedArgumentsNeverStored(t *testing.T) {
	h := start(t, gateway.Config{})
	if err := os.MkdirAll(filepath.Join(h.dir, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, "policies", "logmask.rego"), []byte(`package lush.policies.logmask

mask contains "/input/arguments/token"
mask contains {"op": "upsert", "path": "/input/arguments/account", "value": "<account>"} if input.arguments.account
`), 0o644); err != nil {
		t.Fatal(err)
	}
	h.deploy(h.dir)
	const token, account = "tok-must-not-be-stored-7731", "acct-must-not-be-stored-0042"
	callTool(t, h.client("assistant", aliceKey), "tests__echo", map[string]any{"text": "hello", "token": token, "account": account})
	recs := h.events(decisionlog.Filter{Principal: "user:alice", Action: "tools/call"})
	if len(recs) != 1 {
		t.Fatalf("%d events", len(recs))
	}
	ev := recs[0].Event
	input := string(ev.Input)
	if !strings.Contains(input, `"text":"hello"`) || !strings.Contains(input, `"account":"<account>"`) || strings.Contains(input, `"token"`) {
		t.Errorf("logged input: %s", input)
	}
	if !slices.Equal(ev.Erased, []string{"/input/arguments/token"}) || !slices.Equal(ev.Masked, []string{"/input/arguments/account"}) {
		t.Errorf("erased %v, masked %v", ev.Erased, ev.Masked)
	}
	h.log.Close()
	for _, f := range []string{h.logPath, h.logPath + "-wal"} {
		data, _ := os.ReadFile(f)
		for _, secret := range []string{token, account} {
			if strings.Contains(string(data), secret) {
				t.Errorf("%s holds %s", filepath.Base(f), secret)
			}
		}
	}
}
