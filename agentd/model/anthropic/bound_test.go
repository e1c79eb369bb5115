package anthropic

import (
	"errors"
	"strings"
	"testing"

	"github.com/lush-agents/lush/agentd/model"
	"github.com/lush-agents/lush/test/anthropicserver"
)

// TestResponseBound: a reply larger than MaxResponseBytes (announced by Content-Length, or a
// stream that goes on) fails the request with a *model.Error that says so and holds no key
// (the SDK would retry it as a dropped connection; setup turns retries off); a reply under the
// bound is answered.
func TestResponseBound(t *testing.T) {
	modes(t, func(t *testing.T, stream bool) {
		s, m := setup(t, func(c *Config) { c.MaxResponseBytes = 1 << 20 })
		s.Push(anthropicserver.Turn{Huge: 8 << 20}, anthropicserver.Turn{Text: "fine"})
		_, _, err := generate(t, m, model.Request{Model: testModel, Messages: []model.Message{userText("hi")}}, stream)
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
