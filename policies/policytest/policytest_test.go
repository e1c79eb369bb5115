package policytest_test

import (
	"context"
	"testing"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/policies/policytest"
)

// A test that mocks the project's data over the compiled bundle sees the mocks: the decision's
// fast path reads data.lush.index, which the compiler derives from the compiled project, so Run
// leaves the index out and the full rules decide from the mocked data.
func TestMockedProjectDataDecides(t *testing.T) {
	res, err := compiler.Build(context.Background(), "../../examples/quickstart", compiler.Offline(true))
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatalf("build the quickstart: %+v", res)
	}
	src := `package mocks_test

read := {
	"action": "tools/call", "live_writes": false, "agent": "researcher", "chain": [], "depth": 0,
	"principal": {"id": "user:bob", "groups": ["group:engineering"]},
	"tool": {"ref": "mcp://npx/@modelcontextprotocol/server-filesystem", "name": "read_text_file"},
	"arguments": {"path": "q3.md"},
}

test_bob_reads if data.lush.authz.decision.allow with input as read

test_without_grants_bob_does_not_read if {
	d := data.lush.authz.decision with input as read with data.lush.project.grants as {}
	not d.allow
	some r in d.rules
	startswith(r, "lush.privilege.")
}

test_without_execute_bob_does_not_read if {
	not data.lush.authz.decision.allow with input as read with data.lush.project.agents.researcher.acl as {}
}
`
	rep, err := policytest.Run(context.Background(), res.Bundle,
		[]policytest.TestFile{{Path: "policies/mocks_test.rego", Source: []byte(src)}}, policytest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed != 3 || rep.Failed+rep.Errored != 0 {
		for _, tt := range rep.Tests {
			t.Logf("%+v", tt)
		}
		t.Fatalf("passed %d of 3 tests, %d failed, %d errored", rep.Passed, rep.Failed, rep.Errored)
	}
}
