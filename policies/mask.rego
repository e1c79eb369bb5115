package lush.authz

# Log masking: project policies (packages lush.policies.<name>) may define
#   mask contains x
# where x is a JSON pointer into the logged input, "/input/...", whose value
# the decision log removes, or, as in OPA's system.log.mask, an object
#   {"op": "remove", "path": "/input/..."} or
#   {"op": "upsert", "path": "/input/...", "value": v}
# that removes the value or replaces it with v. log_mask collects them from
# every project package (not _test packages), normalized to {"op", "path"}
# plus "value" for upserts. Malformed entries are ignored. The decision never
# reads log_mask; the engine evaluates it only for the decision log.
log_mask contains m if {
	some name
	v := data.lush.policies[name].mask
	not endswith(name, "_test")
	type_name(v) in {"set", "array"}
	some x in v
	m := mask_op(x)
}

mask_op(x) := {"op": "remove", "path": x} if {
	mask_path(x)
} else := {"op": "remove", "path": x.path} if {
	is_object(x)
	x.op == "remove"
	mask_path(x.path)
} else := {"op": "upsert", "path": x.path, "value": x.value} if {
	is_object(x)
	x.op == "upsert"
	mask_path(x.path)
	"value" in object.keys(x)
}

# mask_path(p): p points below the input, "/input/<something>".
mask_path(p) if {
	is_string(p)
	startswith(p, "/input/")
	p != "/input/"
}
