package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/internal/mcphttp"
)

// A tools/call result is a created task in either wire, and nothing else is.
func TestCreatedTask(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result string
		id     string
		ttl    time.Duration
	}{
		{"2026-07-28", `{"resultType":"task","taskId":"t1","status":"working","ttlMs":30000}`, "t1", 30 * time.Second},
		{"2026-07-28 without ttl", `{"resultType":"task","taskId":"t1","status":"working","ttlMs":null}`, "t1", 0},
		{"2025-11-25", `{"task":{"taskId":"t2","status":"working","ttl":5000}}`, "t2", 5 * time.Second},
		{"2025-11-25 ttl beyond the bound", `{"task":{"taskId":"t2","ttl":99999999999}}`, "t2", 0},
		{"a tool result", `{"content":[{"type":"text","text":"task"}]}`, "", 0},
		{"a complete result naming a task id", `{"resultType":"complete","taskId":"t3","content":[]}`, "", 0},
		{"an empty id", `{"resultType":"task","taskId":""}`, "", 0},
		{"an id too long", `{"resultType":"task","taskId":"` + strings.Repeat("x", maxTaskID+1) + `"}`, "", 0},
		{"not JSON", `{"task":`, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, ttl, ok := createdTask(json.RawMessage(tc.result))
			if id != tc.id || ttl != tc.ttl || ok != (tc.id != "") {
				t.Fatalf("createdTask: %q %v %v, want %q %v", id, ttl, ok, tc.id, tc.ttl)
			}
		})
	}
}

// At 2026-07-28, tasks/result and tasks/list are not methods, and the other task methods need
// the client to declare the extension (in the request's _meta); before it, tasks/update is not a
// method.
func TestTaskMethodsByProtocol(t *testing.T) {
	declared := `{"taskId":"t","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`
	for _, tc := range []struct {
		protocol, method, params string
		code                     int
	}{
		{"2026-07-28", "tasks/result", declared, mcphttp.CodeMethodNotFound},
		{"2026-07-28", "tasks/list", declared, mcphttp.CodeMethodNotFound},
		{"2026-07-28", "tasks/get", `{"taskId":"t"}`, CodeMissingClientCapability},
		{"2026-07-28", "tasks/cancel", `{"taskId":"t","_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}`, CodeMissingClientCapability},
		{"2026-07-28", "tasks/update", `{"taskId":"t","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":null}}}}`, CodeMissingClientCapability},
		{"2026-07-28", "tasks/get", `{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`, mcphttp.CodeInvalidParams},
		{"2025-11-25", "tasks/update", declared, mcphttp.CodeMethodNotFound},
		{"2025-11-25", "tasks/get", `{}`, mcphttp.CodeInvalidParams},
	} {
		t.Run(tc.protocol+" "+tc.method, func(t *testing.T) {
			c := &call{g: &Gateway{}, agent: "a", req: &mcphttp.Request{Protocol: tc.protocol, Method: tc.method, Params: json.RawMessage(tc.params)}}
			_, err := c.task(context.Background())
			var rpc *mcphttp.Error
			if !errors.As(err, &rpc) || rpc.Code != tc.code {
				t.Fatalf("%v, want code %d", err, tc.code)
			}
			if tc.code == CodeMissingClientCapability {
				data, _ := json.Marshal(rpc.Data)
				if want := `{"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`; string(data) != want {
					t.Fatalf("data %s, want %s", data, want)
				}
			}
		})
	}
}
