package lush.policies.logmask_test

import data.lush.policies.logmask

test_credentials_masked if {
	logmask.mask == {"/input/arguments/token", "/input/arguments/API_KEY"} with input as {
		"action": "tools/call",
		"arguments": {"token": "t0k3n", "API_KEY": "k3y", "path": "drafts/a.md"},
	}
}

test_other_arguments_kept if {
	count(logmask.mask) == 0 with input as {"action": "tools/call", "arguments": {"path": "drafts/a.md"}}
}

# The base library collects every project's masks into the operations the log applies.
test_log_mask_collects_it if {
	data.lush.authz.log_mask == {{"op": "remove", "path": "/input/arguments/password"}} with input as {
		"action": "tools/call",
		"arguments": {"password": "hunter2"},
	}
}
