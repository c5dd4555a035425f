package pacing

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSaturatedQueue is the credentials actor's work per turn in a
// saturated storm: 2,000 turns wait on two keys, and each op settles one
// granted turn, queues a new one, releases what fits and asks when the
// next goes (the storm's run: 6,000 turns; pacing's CPU once rose 20×
// when a release read the whole queue).
func BenchmarkSaturatedQueue(b *testing.B) {
	p := New([]string{"a", "b"}, map[string]Limits{"a": {RPM: 600, TPM: 200_000}, "b": {RPM: 600, TPM: 200_000}}, t0, Options{Window: time.Minute})
	need := func(i int) Need { return Need{Input: []int64{25, 150, 600}[i%3], Output: 256, Bounded: true} }
	prio := func(i int) Priority { return []Priority{High, Low, Low, Low, Low}[i%5] }
	prefer := func(i int) string { return []string{"a", "b"}[i%2] }
	for i := range 2000 {
		p.Reserve(t0, fmt.Sprint(i), prio(i), prefer(i), need(i))
	}
	now := t0
	var out []Grant
	b.ResetTimer()
	for i := range b.N {
		now = now.Add(50 * time.Millisecond)
		if len(out) > 0 {
			p.Settle(now, out[0].ID, Usage{Sent: true, Input: 100, Output: 30})
			out = out[1:]
		}
		id := 2000 + i
		p.Reserve(now, fmt.Sprint(id), prio(id), prefer(id), need(id))
		out = append(out, p.Release(now)...)
		p.NextRelease(now)
	}
}
