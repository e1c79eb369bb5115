package decisionlog

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

// BenchmarkRecord measures Record with 1, 16 and 64 concurrent writers: events/s, and each
// Record's latency (p50, p99) from the call to the commit. Decision ids are UUIDv7 (time-ordered,
// so the decision_id index grows at its end); ids=v4 shows the cost of random ids.
func BenchmarkRecord(b *testing.B) {
	for _, tc := range []struct {
		writers int
		ids     string
	}{{1, "v7"}, {16, "v7"}, {64, "v7"}, {64, "v4"}} {
		writers := tc.writers
		newID := func() string { return uuid.Must(uuid.NewV7()).String() }
		if tc.ids == "v4" {
			newID = uuid.NewString
		}
		b.Run(fmt.Sprintf("writers=%d/ids=%s", writers, tc.ids), func(b *testing.B) {
			ctx := context.Background()
			l, err := Open(ctx, filepath.Join(b.TempDir(), "decisions.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			template := sampleEvent("")
			var next atomic.Int64
			lat := make([][]time.Duration, writers)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := range writers {
				wg.Go(func() {
					mine := make([]time.Duration, 0, b.N/writers+1)
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							break
						}
						e := *template
						e.DecisionID = newID()
						_ = w
						t0 := time.Now()
						if err := l.Record(ctx, &e); err != nil {
							b.Error(err)
							return
						}
						mine = append(mine, time.Since(t0))
					}
					lat[w] = mine
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) == 0 {
				return
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
			if st := l.Stats(); st.Failed != 0 || st.Written != int64(b.N) {
				b.Fatalf("stats %+v after %d records", st, b.N)
			}
		})
	}
}
