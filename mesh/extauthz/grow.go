package extauthz

import (
	"strings"

	"github.com/lush-agents/lush/policies/authz"
)

// Evaluating a project policy over a call's arguments recurses deeply in OPA's evaluator: it
// needs about 300 KiB of stack. A goroutine that starts small grows its stack by doubling, each
// time copying it and adjusting every frame of the deep evaluation: that took 25–40% of the CPU
// of such a Check. reserveStack grows it in one step before the evaluation, while the stack is
// still shallow and cheap to copy (on a stream worker whose stack is already large, it costs
// nothing). Its frame is reserved, never written. The price is memory: such a Check holds a
// 512 KiB stack while it is in flight (the evaluation would have grown it as far).

// stackSink is never set: it keeps reserveStack's frame from being optimized away.
var stackSink bool

// reserveStack makes the calling goroutine's stack large enough for a policy evaluation
// (its frame: 4 × 64 KiB; the runtime rounds the stack up to a power of two).
//
//go:noinline
func reserveStack() {
	if stackSink {
		var a, b, c, d [64 << 10]byte
		sinkStack(a[:], b[:], c[:], d[:])
	}
}

//go:noinline
func sinkStack(...[]byte) {}

// evaluatedEngine is whether tools/calls with arguments are evaluated under one engine.
type evaluatedEngine struct {
	engine    *authz.Engine
	evaluates bool
}

// evaluatesCalls reports whether the deployed policy evaluates tools/calls with new arguments,
// not the decision cache: a project policy reads the arguments (the cache keys on them), or the
// cache is off. It is worked out once per deployed engine.
func (s *Server) evaluatesCalls() bool {
	eng := s.opts.Policy.Engine()
	if eng == nil {
		return false
	}
	if e := s.evaluated.Load(); e != nil && e.engine == eng {
		return e.evaluates
	}
	_, _, cached, _ := eng.CacheStats()
	evaluates := !cached
	for _, d := range eng.InputDependencies() {
		d = strings.TrimSuffix(strings.TrimPrefix(d, "type("), ")")
		if d == "." || d == "arguments" || strings.HasPrefix(d, "arguments.") {
			evaluates = true
		}
	}
	s.evaluated.Store(&evaluatedEngine{engine: eng, evaluates: evaluates})
	return evaluates
}
