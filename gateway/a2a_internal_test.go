package gateway

import (
	"encoding/json"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
)

// TestA2AResult: an A2A answer becomes a tool result: a message's text, a task's id and state,
// status message and artifacts; a task that failed, was rejected or was canceled is an error.
func TestA2AResult(t *testing.T) {
	task := func(state a2a.TaskState, artifacts ...*a2a.Artifact) *a2a.Task {
		return &a2a.Task{ID: "t1", ContextID: "c1", Status: a2a.TaskStatus{State: state,
			Message: a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "status"})}, Artifacts: artifacts}
	}
	tests := []struct {
		name    string
		res     a2a.SendMessageResult
		text    string
		isError bool
	}{
		{"message", a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "hi"}, a2a.DataPart{Data: map[string]any{"n": 1}}), "hi\n{\"n\":1}", false},
		{"completed task", task(a2a.TaskStateCompleted, &a2a.Artifact{ID: "a", Parts: a2a.ContentParts{a2a.TextPart{Text: "done"}}}), "task t1: completed\nstatus\ndone", false},
		{"failed task", task(a2a.TaskStateFailed), "task t1: failed\nstatus", true},
		{"rejected task", task(a2a.TaskStateRejected), "task t1: rejected\nstatus", true},
		{"input required", task(a2a.TaskStateInputRequired), "task t1: input-required\nstatus", false},
	}
	for _, tt := range tests {
		raw, err := a2aResult(tt.res)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var got struct {
			Content []struct {
				Type, Text string
			}
			StructuredContent map[string]any
			IsError           bool
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if len(got.Content) != 1 || got.Content[0].Text != tt.text || got.IsError != tt.isError || got.StructuredContent["kind"] == nil {
			t.Errorf("%s: %s", tt.name, raw)
		}
	}
}
