package pgstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/session"
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

// BenchmarkAttemptWrites is what one retry attempt writes to the database:
// the failed turn's entry (every store), then, for a durable chain, the
// session's record of the backoff (CommitRecord: the encoded core, about
// 400 bytes here, and its due time). The difference between the two is
// what durable chains cost per attempt.
func BenchmarkAttemptWrites(b *testing.B) {
	failed := func(seq uint64) *messages.Entry {
		return &messages.Entry{Seq: seq, Entry: &messages.Entry_Assistant{Assistant: provider.Failure(503, "503 Service Unavailable", nil)}}
	}
	rec := session.Record{State: session.Backoff, Generation: 1, Turn: 3, AutoRetry: true, Role: "default",
		Primary: "p/m", Model: "p/m", SleepUntil: time.Now().Add(2 * time.Second), Chain: session.ChainRecord{Attempt: 3, Token: 3},
		Last: provider.Failure(503, "503 Service Unavailable", nil)}
	for _, durable := range []bool{false, true} {
		name := "entry"
		if durable {
			name = "entry+record"
		}
		b.Run(name, func(b *testing.B) {
			s := connect(b, server.NewDatabase(b), "bench")
			l, _ := openLog(b, s, "s")
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := l.Append(failed(uint64(i + 1))); err != nil {
					b.Fatal(err)
				}
				if !durable {
					continue
				}
				rec.HistorySeq = uint64(i + 1)
				data, err := proto.Marshal(rec.Wire())
				if err != nil {
					b.Fatal(err)
				}
				if err := l.(history.RecordLog).CommitRecord(history.Record{Data: data, Due: rec.SleepUntil}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/attempt")
		})
	}
}
