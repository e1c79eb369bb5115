package gemini

import (
	"errors"
	"strings"
	"testing"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/test/geminiserver"
)

// TestResponseBound: a reply larger than MaxResponseBytes (announced by Content-Length, or a
// stream that goes on) fails the request with a *model.Error that says so and holds no key; a
// reply under the bound is answered.
func TestResponseBound(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "unary", true: "stream"}[stream], func(t *testing.T) {
			s := geminiserver.New(testKey)
			t.Cleanup(s.Close)
			m, err := New(t.Context(), Config{APIKey: testKey, BaseURL: s.URL(), MaxResponseBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			s.Push(geminiserver.Turn{Huge: 8 << 20}, geminiserver.Turn{Text: "fine"})
			_, _, err = generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
			var me *model.Error
			if !errors.As(err, &me) || me.Provider != provider || !strings.Contains(me.Message, "larger than 1048576 bytes") {
				t.Fatalf("err = %v (%T), want the bound's *model.Error", err, err)
			}
			if strings.Contains(err.Error(), testKey) {
				t.Error("the key is in the error")
			}
			resp, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
			if err != nil || resp.Text() != "fine" {
				t.Errorf("the next reply: %v %+v", err, resp)
			}
		})
	}
}
