package a2a

import (
	"context"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/lush-agents/lush/internal/taskstore"
)

// Bounds of the task store.
const (
	maxTasks  = 10_000          // records; beyond it the one that expires first is forgotten
	taskTTL   = 24 * time.Hour  // a task is forgotten this long after it was created
	maxTaskID = 256             // bytes of a task id decided or answered
	maxText   = 4 << 20         // bytes of the text of one message (as agentd's chat body)
	maxBody   = maxText + 1<<20 // bytes of one JSON-RPC request
)

// record is a task an A2A message created: who created it, at which agent, the invocation's
// decision, and the task as last answered. cancel ends the invocation while it runs.
type record struct {
	principal  string
	agent      string
	decisionID string
	task       *a2a.Task
	cancel     context.CancelCauseFunc // nil once the invocation ended
}

// newTaskStore is the store of this process's A2A tasks by agent and id: at most maxTasks of
// them, each for at most taskTTL, the one that expires first forgotten beyond the bound. A
// forgotten task is answered as an unknown one.
func newTaskStore() *taskstore.Store[record] {
	return taskstore.New[record](maxTasks, taskTTL)
}

// cloneTask copies what the handler changes of a task: its status, artifacts and history slices.
func cloneTask(t *a2a.Task) *a2a.Task {
	c := *t
	c.Artifacts = append([]*a2a.Artifact(nil), t.Artifacts...)
	c.History = append([]*a2a.Message(nil), t.History...)
	return &c
}
