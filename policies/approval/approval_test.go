package approval

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestDigest: the digest is the call's, not its encoding's: key order and space do not matter;
// the tool, the arguments' values, the principal and the agent each do.
func TestDigest(t *testing.T) {
	base := Call{Tool: "mcp://ops.internal/mcp", ToolName: "restart", Arguments: json.RawMessage(`{"host": "db-1", "force": true, "n": 1}`),
		Principal: "user:alice", Agent: "ops"}
	same := []json.RawMessage{
		json.RawMessage(`{"n":1,"force":true,"host":"db-1"}`),
		json.RawMessage("{\n  \"force\": true,\n  \"host\": \"db-1\",\n  \"n\": 1\n}"),
	}
	for _, args := range same {
		c := base
		c.Arguments = args
		if c.Digest() != base.Digest() {
			t.Errorf("%s: a different digest for the same call", args)
		}
	}
	change := map[string]func(c *Call){
		"tool":           func(c *Call) { c.Tool = "mcp://other/mcp" },
		"name":           func(c *Call) { c.ToolName = "stop" },
		"argument value": func(c *Call) { c.Arguments = json.RawMessage(`{"host": "db-2", "force": true, "n": 1}`) },
		"argument added": func(c *Call) { c.Arguments = json.RawMessage(`{"host": "db-1", "force": true, "n": 1, "x": null}`) },
		"number text":    func(c *Call) { c.Arguments = json.RawMessage(`{"host": "db-1", "force": true, "n": 1.0}`) },
		"principal":      func(c *Call) { c.Principal = "user:bob" },
		"agent":          func(c *Call) { c.Agent = "janitor" },
		// Length prefixes: moving a character from one field to the next changes the digest.
		"field boundary": func(c *Call) { c.Principal, c.Agent = "user:alic", "eops" },
	}
	for name, f := range change {
		c := base
		f(&c)
		if c.Digest() == base.Digest() {
			t.Errorf("%s: the digest did not change", name)
		}
	}
	empty := Call{Tool: "tools/x"}
	for _, args := range []json.RawMessage{nil, json.RawMessage(`null`), json.RawMessage(`{}`), json.RawMessage(` { } `)} {
		c := empty
		c.Arguments = args
		if c.Digest() != empty.Digest() {
			t.Errorf("%q: no arguments have one digest", args)
		}
	}
	if d := base.Digest(); len(d) != 64 || strings.Trim(d, "0123456789abcdef") != "" {
		t.Errorf("digest %q is not hex SHA-256", d)
	}
}

func TestConfig(t *testing.T) {
	if c := (Config{}).WithDefaults(); c.Wait != DefaultWait || c.ExpireAfter != DefaultExpiry || c.Poll != DefaultPoll {
		t.Errorf("defaults: %+v", c)
	}
	if c := (Config{Wait: 2 * time.Hour}).WithDefaults(); c.ExpireAfter != 2*time.Hour {
		t.Errorf("a long wait: expiry %s", c.ExpireAfter)
	}
	for _, c := range []Config{{Wait: -1}, {Poll: -1}, {Wait: time.Hour, ExpireAfter: time.Minute}} {
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "approvals: ") {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if err := (Config{Wait: time.Minute, ExpireAfter: time.Hour}).Validate(); err != nil {
		t.Error(err)
	}
}
