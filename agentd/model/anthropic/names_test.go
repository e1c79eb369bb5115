package anthropic

import (
	"strings"
	"testing"

	"github.com/lush-agents/lush/agentd/model"
)

// The rule the Model declares (model.ToolNamer) is the one its requests are checked with: a
// name it accepts is mapped, one it refuses is an error before anything is sent.
func TestDeclaredToolNames(t *testing.T) {
	_, m := setup(t, nil)
	rule := m.ToolNames(t.Context(), model.Request{})
	for _, name := range []string{"notes_search", "a-b", "9lives", strings.Repeat("x", 128), "notes.search", strings.Repeat("x", 129), "a:b"} {
		_, err := toTools([]model.Tool{{Name: name}})
		if rule.Valid(name) != (err == nil) {
			t.Errorf("%q: the rule says %v, the request: %v", name, rule.Valid(name), err)
		}
	}
}
