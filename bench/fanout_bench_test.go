package bench

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
)

// drainClock is the wall clock, counting the fan-out's delivery goroutines
// (each runs between Begin and End) so the benchmark can wait for them to exit.
type drainClock struct {
	clock.Real
	wg sync.WaitGroup
}

func (c *drainClock) Begin() { c.wg.Add(1) }
func (c *drainClock) End()   { c.wg.Done() }

// BenchmarkFanout: one op is one event published through actors.Fanout and
// delivered to every subscriber; the timer stops only once each subscriber
// has received all b.N events. Queues hold b.N events so none is lost.
func BenchmarkFanout(b *testing.B) {
	ev := &messages.SessionEvent{SessionId: "s", Seq: 1, TimeMs: 1_796_205_600_000,
		Event: &messages.SessionEvent_AutoRetryStart{AutoRetryStart: &messages.AutoRetryStart{
			Attempt: 1, MaxAttempts: 10, DelayMs: 500,
			ErrorMessage: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			ErrorClass:   "transient",
		}}}
	for _, subscribers := range []int{1, 8} {
		b.Run(fmt.Sprintf("subscribers=%d", subscribers), func(b *testing.B) {
			clk := &drainClock{}
			f := actors.NewFanout(clk, slog.New(slog.DiscardHandler), max(b.N, actors.DefaultQueueLen))
			var (
				pending  atomic.Int64 // subscribers still missing events
				done     = make(chan struct{})
				lostOnce sync.Once
				lost     = make(chan struct{}) // closed on an EventsLost notice
				unsubs   = make([]func(), 0, subscribers)
			)
			pending.Store(int64(subscribers))
			for range subscribers {
				received := 0 // calls of one subscriber never overlap
				unsubs = append(unsubs, f.Subscribe(func(e *messages.SessionEvent) {
					if e.GetEventsLost() != nil {
						lostOnce.Do(func() { close(lost) })
						return
					}
					if received++; received == b.N && pending.Add(-1) == 0 {
						close(done)
					}
				}))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				f.Publish(ev)
			}
			var failed bool
			select {
			case <-done:
			case <-lost:
				failed = true
			}
			b.StopTimer()
			for _, unsubscribe := range unsubs {
				unsubscribe()
			}
			clk.wg.Wait() // every delivery goroutine has exited
			if failed {
				b.Fatal("a subscriber was told events were lost")
			}
		})
	}
}
