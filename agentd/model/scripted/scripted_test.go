package scripted

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lush-agents/lush/agentd/model"
)

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReplay(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", `turns:
  - calls: [{name: echo, args: {text: "{{message}}!", n: 3}}]
  - text: "got {{result}}"
    usage: {input: 10, output: 2}
`)
	m, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	user := model.Message{Role: model.RoleUser, Parts: []model.Part{{Text: "hi"}}}
	r1, err := m.Generate(ctx, model.Request{Agent: "a", Messages: []model.Message{user}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := r1.Calls()
	if len(calls) != 1 || calls[0].Name != "echo" || calls[0].Args["text"] != "hi!" || calls[0].Args["n"] != 3 {
		t.Fatalf("turn 1: %+v", calls)
	}
	if r1.Usage.Input == 0 {
		t.Error("turn 1 has no estimated usage")
	}
	conv := []model.Message{user, {Role: model.RoleModel, Parts: r1.Parts},
		{Role: model.RoleUser, Parts: []model.Part{{Result: &model.ToolResult{Name: "echo", Output: map[string]any{"result": "hi!"}}}}}}
	var streamed strings.Builder
	r2, err := m.Generate(ctx, model.Request{Agent: "a", Messages: conv}, func(s string) { streamed.WriteString(s) })
	if err != nil {
		t.Fatal(err)
	}
	if r2.Text() != "got hi!" || streamed.String() != "got hi!" || r2.Usage != (model.Usage{Input: 10, Output: 2}) {
		t.Fatalf("turn 2: %q streamed %q usage %+v", r2.Text(), streamed.String(), r2.Usage)
	}
	// A new message starts the script again, after the earlier turns.
	conv = append(conv, model.Message{Role: model.RoleModel, Parts: r2.Parts}, model.Message{Role: model.RoleUser, Parts: []model.Part{{Text: "again"}}})
	r3, err := m.Generate(ctx, model.Request{Agent: "a", Messages: conv}, nil)
	if err != nil || len(r3.Calls()) != 1 || r3.Calls()[0].Args["text"] != "again!" {
		t.Fatalf("turn 1 of the second message: %+v %v", r3, err)
	}
	// Past the end of the script.
	conv = append(conv, model.Message{Role: model.RoleModel, Parts: r3.Parts}, model.Message{Role: model.RoleModel})
	if _, err := m.Generate(ctx, model.Request{Agent: "a", Messages: conv}, nil); err == nil || !strings.Contains(err.Error(), "has 2 turns; the conversation needs turn 3") {
		t.Errorf("past the end: %v", err)
	}
}

func TestBadScripts(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, content, want string }{
		{"unknown", "turns:\n  - txt: hi\n", "line 2: field txt not found"},
		{"empty", "turns: []\n", "no turns"},
		{"blank", "turns:\n  - {}\n", "turns[0]: a turn needs text, calls or error"},
		{"noname", "turns:\n  - calls: [{args: {}}]\n", "turns[0].calls[0].name: required"},
		{"fails", "turns:\n  - error: quota exhausted\n", "quota exhausted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(t, dir, tc.name+".yaml", tc.content)
			m, _ := New(dir)
			_, err := m.Generate(context.Background(), model.Request{Agent: tc.name, Messages: []model.Message{{Role: model.RoleUser, Parts: []model.Part{{Text: "x"}}}}}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
	m, _ := New(dir)
	if _, err := m.Generate(context.Background(), model.Request{Agent: "missing"}, nil); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing script: %v", err)
	}
	if _, err := New(filepath.Join(dir, "nope")); err == nil {
		t.Error("New accepted a missing directory")
	}
}

func TestSleepEndsWithTheInvocation(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "slow.yaml", "turns:\n  - text: late\n    sleep: 1h\n")
	m, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	user := model.Message{Role: model.RoleUser, Parts: []model.Part{{Text: "hi"}}}
	if _, err := m.Generate(ctx, model.Request{Agent: "slow", Messages: []model.Message{user}}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Generate = %v, want the deadline", err)
	}
	write(t, dir, "quick.yaml", "turns:\n  - text: soon\n    sleep: 10ms\n")
	r, err := m.Generate(context.Background(), model.Request{Agent: "quick", Messages: []model.Message{user}}, nil)
	if err != nil || r.Text() != "soon" {
		t.Fatalf("Generate = %v, %v", r, err)
	}
}
