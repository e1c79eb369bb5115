package a2a

import (
	"context"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
)

// Bounds of the task store.
const (
	maxTasks  = 10_000          // records; beyond it the oldest is forgotten
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
	created    time.Time
	task       *a2a.Task
	cancel     context.CancelCauseFunc // nil once the invocation ended
}

type taskKey struct {
	agent string
	id    a2a.TaskID
}

// taskStore holds the tasks of this process by agent and id, at most maxTasks of them, each
// for at most taskTTL. A forgotten task is answered as an unknown one.
type taskStore struct {
	mu   sync.Mutex
	byID map[taskKey]*record
	now  func() time.Time
}

func newTaskStore() *taskStore {
	return &taskStore{byID: map[taskKey]*record{}, now: time.Now}
}

func (s *taskStore) add(r *record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r.created = now
	if len(s.byID) >= maxTasks {
		var oldest *taskKey
		for k, x := range s.byID {
			if now.Sub(x.created) > taskTTL {
				delete(s.byID, k)
				continue
			}
			if oldest == nil || x.created.Before(s.byID[*oldest].created) {
				k := k
				oldest = &k
			}
		}
		if len(s.byID) >= maxTasks && oldest != nil {
			delete(s.byID, *oldest)
		}
	}
	s.byID[taskKey{r.agent, r.task.ID}] = r
}

// get returns a copy of the record of a task (its task cloned), ok false for an unknown or
// expired one.
func (s *taskStore) get(agent string, id a2a.TaskID) (record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byID[taskKey{agent, id}]
	if !ok || s.now().Sub(r.created) > taskTTL {
		return record{}, false
	}
	c := *r
	c.task = cloneTask(r.task)
	return c, true
}

// update applies f to a known task's record under the lock.
func (s *taskStore) update(agent string, id a2a.TaskID, f func(r *record)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.byID[taskKey{agent, id}]; ok {
		f(r)
	}
}

// cloneTask copies what the handler changes of a task: its status, artifacts and history slices.
func cloneTask(t *a2a.Task) *a2a.Task {
	c := *t
	c.Artifacts = append([]*a2a.Artifact(nil), t.Artifacts...)
	c.History = append([]*a2a.Message(nil), t.History...)
	return &c
}
