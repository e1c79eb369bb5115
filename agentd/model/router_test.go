package model_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/lush-agents/lush/agentd/model"
)

// echo is a provider that answers with its name and the model id it was asked for.
type echo struct{ name string }

func (e echo) Generate(_ context.Context, req model.Request, _ func(string)) (*model.Response, error) {
	return &model.Response{Parts: []model.Part{{Text: e.name + ":" + req.Model + ":" + req.Target.Provider}}}, nil
}

// TestRouter: each request runs on the provider its target names, with the provider's model id;
// a provider's client is made once per target and reused; a provider the process does not run
// is a clear error.
func TestRouter(t *testing.T) {
	var mu sync.Mutex
	made := map[string]int{}
	factory := func(name string) model.Factory {
		return func(_ context.Context, project string, tg model.Target) (model.Model, error) {
			mu.Lock()
			defer mu.Unlock()
			made[name+" "+project+" "+tg.BaseURL]++
			return echo{name}, nil
		}
	}
	r := model.NewRouter(map[string]model.Factory{"gemini": factory("g"), "openai": factory("o")})
	if got := strings.Join(r.Providers(), ","); got != "gemini,openai" {
		t.Errorf("providers = %s", got)
	}
	tests := []struct {
		name    string
		req     model.Request
		want    string // the text the provider answers, or the error's substring
		wantErr bool
	}{
		{"openai", model.Request{Model: "openai/gpt-4.1", Project: "p", Target: model.Target{Provider: "openai", Model: "gpt-4.1"}}, "o:gpt-4.1:openai", false},
		{"openai again", model.Request{Model: "openai/gpt-4.1", Project: "p", Target: model.Target{Provider: "openai", Model: "gpt-4.1"}}, "o:gpt-4.1:openai", false},
		{"entry at a base url", model.Request{Model: "local", Project: "p", Target: model.Target{Provider: "openai", Model: "llama3", BaseURL: "http://127.0.0.1:1/v1"}}, "o:llama3:openai", false},
		{"gemini", model.Request{Model: "gemini/gemini-2.5-flash", Project: "p", Target: model.Target{Provider: "gemini", Model: "gemini-2.5-flash", Credential: "model://gemini"}}, "g:gemini-2.5-flash:gemini", false},
		{"no target is gemini", model.Request{Model: "gemini-2.5-pro", Project: "p"}, "g:gemini-2.5-pro:gemini", false},
		{"provider not run", model.Request{Model: "anthropic/claude-sonnet-4-5", Target: model.Target{Provider: "anthropic", Model: "claude-sonnet-4-5"}},
			"does not run models on anthropic (it runs gemini, openai)", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := r.Generate(t.Context(), tt.req, nil)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Text() != tt.want {
				t.Errorf("answer = %q, want %q", resp.Text(), tt.want)
			}
		})
	}
	want := map[string]int{"o p ": 1, "o p http://127.0.0.1:1/v1": 1, "g p ": 1}
	if fmt.Sprint(made) != fmt.Sprint(want) {
		t.Errorf("clients made = %v, want %v (one per target)", made, want)
	}
}

// TestRouterBound: the router keeps at most MaxRoutes clients; a factory's failure is returned
// with the target it was for.
func TestRouterBound(t *testing.T) {
	var made int
	r := model.NewRouter(map[string]model.Factory{"openai": func(_ context.Context, _ string, tg model.Target) (model.Model, error) {
		if tg.BaseURL == "broken" {
			return nil, fmt.Errorf("no client")
		}
		made++
		return echo{"o"}, nil
	}})
	for i := range model.MaxRoutes + 10 {
		if _, err := r.Generate(t.Context(), model.Request{Target: model.Target{Provider: "openai", Model: "m", BaseURL: fmt.Sprint(i)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The first targets were dropped; asking again makes a new client.
	before := made
	for i := range model.MaxRoutes + 10 {
		if _, err := r.Generate(t.Context(), model.Request{Target: model.Target{Provider: "openai", Model: "m", BaseURL: fmt.Sprint(i)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if made == before {
		t.Errorf("no client was made again: the router keeps more than %d", model.MaxRoutes)
	}
	_, err := r.Generate(t.Context(), model.Request{Target: model.Target{Provider: "openai", Model: "m", BaseURL: "broken"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "set up openai model m: no client") {
		t.Errorf("err = %v", err)
	}
}
