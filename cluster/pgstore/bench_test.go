package pgstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/musepi/musepi/history"
)

// BenchmarkAppend is one fenced Append of one entry on loopback: the
// database round trips a session's writes cost in cluster mode. "serial"
// is one session; "parallel" is a session per goroutine. The test server
// runs with fsync off, so the figure is the protocol's and the
// transaction's cost, not the disk's.
func BenchmarkAppend(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		s := connect(b, server.NewDatabase(b), "bench")
		l, _ := openLog(b, s, "s")
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if err := l.Append(user(uint64(i+1), "a prompt")); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	})
	b.Run("parallel", func(b *testing.B) {
		s := connect(b, server.NewDatabase(b), "bench")
		var id atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			l, _, err := s.Open(fmt.Sprint("s", id.Add(1)))
			if err != nil {
				b.Error(err)
				return
			}
			defer l.Close()
			appendAll(b, l, pb)
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	})
}

func appendAll(b *testing.B, l history.Log, pb *testing.PB) {
	for seq := uint64(1); pb.Next(); seq++ {
		if err := l.Append(user(seq, "a prompt")); err != nil {
			b.Error(err)
			return
		}
	}
}
