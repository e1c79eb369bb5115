package compiler_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/lush-agents/lush/compiler"
	"github.com/lush-agents/lush/test/gen"
)

// BenchmarkBuild builds generated projects of growing size offline: the full pipeline, manifest,
// bundle and its verification by OPA. The largest is the target: 1,000 agents, 200
// loops, 10,000 grants. Sizes grow 2x, so time/op should grow about 2x if the build is linear.
func BenchmarkBuild(b *testing.B) {
	for _, agents := range []int{125, 250, 500, 1000, 2000} {
		size := gen.Size{Agents: agents, Loops: agents / 5, Grants: agents * 10}
		b.Run(fmt.Sprintf("agents=%d/loops=%d/grants=%d", size.Agents, size.Loops, size.Grants), func(b *testing.B) {
			dir := b.TempDir()
			if err := gen.Write(dir, size); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				res, err := compiler.Build(context.Background(), dir, compiler.Offline(true))
				if err != nil {
					b.Fatal(err)
				}
				if !res.OK() {
					b.Fatalf("generated project does not build: %v", res.Diagnostics[:min(5, len(res.Diagnostics))])
				}
			}
		})
	}
}
