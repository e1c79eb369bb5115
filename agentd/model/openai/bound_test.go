package openai

import (
	"errors"
	"strings"
	"testing"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/test/openaiserver"
)

// TestResponseBound: a reply larger than MaxResponseBytes (announced by Content-Length, or a
// stream that goes on) fails the request with a *model.Error that says so and holds no key,
// and is not retried; a reply under the bound is answered.
func TestResponseBound(t *testing.T) {
	for _, stream := range modes {
		t.Run(modeName(stream), func(t *testing.T) {
			s, m := setup(t, testKey, Config{MaxResponseBytes: 1 << 20, MaxRetries: 2})
			s.Push(openaiserver.Turn{Huge: 8 << 20}, openaiserver.Turn{Text: "fine"})
			_, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
			var me *model.Error
			if !errors.As(err, &me) || me.Provider != provider || !strings.Contains(me.Message, "larger than 1048576 bytes") {
				t.Fatalf("err = %v (%T), want the bound's *model.Error", err, err)
			}
			if strings.Contains(err.Error(), testKey) {
				t.Error("the key is in the error")
			}
			if n := len(s.Requests()); n != 1 {
				t.Errorf("%d requests: a reply over the bound is not retried", n)
			}
			resp, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
			if err != nil || resp.Text() != "fine" {
				t.Errorf("the next reply: %v %+v", err, resp)
			}
		})
	}
}
