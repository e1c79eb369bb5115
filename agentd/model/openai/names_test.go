package openai

import (
	"strings"
	"testing"

	"github.com/lush-agents/lush/agentd/model"
)

// The rule the Model declares (model.ToolNamer) is the one its requests are checked with: a
// name it accepts is sent, one it refuses is an error before anything is sent.
func TestDeclaredToolNames(t *testing.T) {
	s, m := setup(t, testKey, Config{})
	rule := m.ToolNames(t.Context(), model.Request{})
	for _, name := range []string{"notes_search", "a-b", "9lives", strings.Repeat("x", 64), "notes.search", strings.Repeat("x", 65), "a:b"} {
		_, err := toParams(model.Request{Model: testModel, Tools: []model.Tool{{Name: name}}})
		if rule.Valid(name) != (err == nil) {
			t.Errorf("%q: the rule says %v, the request: %v", name, rule.Valid(name), err)
		}
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d requests were sent", n)
	}
}
