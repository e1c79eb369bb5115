package lush.authz_test

# Log masks of project policies: data.lush.authz.log_mask.

log_mask(policies) := m if {
	m := data.lush.authz.log_mask with input as read_call
		with data.lush.project as project
		with data.lush.policies as policies
}

test_log_mask_forms[note] if {
	some note, tc in {
		"pointer": {"mask": {"/input/arguments/password"}, "want": {{"op": "remove", "path": "/input/arguments/password"}}},
		"remove object": {"mask": {{"op": "remove", "path": "/input/arguments/token"}}, "want": {{"op": "remove", "path": "/input/arguments/token"}}},
		"upsert": {
			"mask": {{"op": "upsert", "path": "/input/arguments/password", "value": "***"}},
			"want": {{"op": "upsert", "path": "/input/arguments/password", "value": "***"}},
		},
		"upsert to null": {
			"mask": {{"op": "upsert", "path": "/input/arguments/key", "value": null}},
			"want": {{"op": "upsert", "path": "/input/arguments/key", "value": null}},
		},
		"array of entries": {"mask": ["/input/a", "/input/b"], "want": {{"op": "remove", "path": "/input/a"}, {"op": "remove", "path": "/input/b"}}},
	}
	log_mask({"corp": {"mask": tc.mask}}) == tc.want
}

test_log_mask_ignores_malformed_entries[note] if {
	some note, entry in {
		"not under input": "/result/allow",
		"input itself": "/input/",
		"relative": "input/arguments",
		"number": 7,
		"upsert without value": {"op": "upsert", "path": "/input/a"},
		"unknown op": {"op": "replace", "path": "/input/a", "value": 1},
		"object path not under input": {"op": "remove", "path": "/decision_id"},
		"object without path": {"op": "remove"},
		"array": ["/input/a"],
	}
	log_mask({"corp": {"mask": {entry}}}) == set()
}

test_log_mask_ignores_non_collections[note] if {
	some note, v in {"string": "/input/a", "object": {"op": "remove", "path": "/input/a"}, "boolean": true}
	log_mask({"corp": {"mask": v}}) == set()
}

test_log_mask_from_several_packages if {
	log_mask({
		"a": {"mask": {"/input/arguments/a"}},
		"b": {"mask": ["/input/arguments/b"], "deny": {"no"}},
		"c_test": {"mask": {"/input/arguments/c"}},
		"d": {"deny": {"x"}},
	}) == {{"op": "remove", "path": "/input/arguments/a"}, {"op": "remove", "path": "/input/arguments/b"}}
}

test_log_mask_empty_without_masks if {
	log_mask({}) == set()
}
