package upstream

import "time"

// TTL is how long a client may cache the server's answer to a list method (tools/list,
// prompts/list, resources/list, resources/templates/list), as the server's last answer said
// (ttlMs, protocol 2026-07-28); false when it said nothing. The gateway's caching hints and its
// catalogs follow it.
//
// Servers are asked their lists at connection and on list_changed, and their answers' ttlMs is
// not kept yet: TTL reports false for every list until it is.
func (l Lists) TTL(method string) (time.Duration, bool) {
	_ = method
	return 0, false
}
