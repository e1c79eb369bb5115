package authz

// OPA's evaluator recurses deeply: evaluating the decision needs a few hundred KiB of stack. A
// goroutine started for a request (net/http and gRPC start one per request) begins with a few
// KiB and grows its stack by doubling, each time copying it and adjusting every frame of the
// deep evaluation: that took 25–40% of the CPU of a decision that missed the cache. reserveStack
// grows it in one step before the evaluation, while the stack is still shallow and cheap to copy;
// on a goroutine whose stack is already large it costs a comparison. Its frame is reserved,
// never written. The price is memory: an evaluation in flight holds a 512 KiB stack, as far as
// the evaluation would have grown it anyway.

// stackSink is never set: it keeps reserveStack's frame from being optimized away.
var stackSink bool

// reserveStack makes the calling goroutine's stack large enough for a policy evaluation (its
// frame: 4 × 64 KiB; the runtime rounds the stack up to a power of two).
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
