package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/internal/testkit/memstat"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// countingClock is a virtual clock that counts the units of work begun:
// every protocol message, plus one per provider stream.
type countingClock struct {
	*clock.Virtual
	begins atomic.Int64
}

func (c *countingClock) Begin() {
	c.begins.Add(1)
	c.Virtual.Begin()
}

type nominal struct{}

func (nominal) Float64() float64 { return 1 }

func newRuntime(b *testing.B, clk clock.Clock, p provider.Provider, s retry.Settings, opts ...musepi.Option) *musepi.Runtime {
	b.Helper()
	rt, err := musepi.NewRuntime(append([]musepi.Option{
		musepi.WithClock(clk),
		musepi.WithProvider("p", p),
		musepi.WithRetrySettings(s),
		musepi.WithJitterSource(func() retry.Source { return nominal{} }),
		musepi.WithLimits(musepi.Limits{}), // b.N may pass the default 100,000 sessions
	}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	return rt
}

// startSessions times b.N new sessions on rt, calling each (if not nil)
// with every one, and waits until clk's work is done.
func startSessions(b *testing.B, ctx context.Context, clk *clock.Virtual, rt *musepi.Runtime, each func(*musepi.Session)) []*musepi.Session {
	sessions := make([]*musepi.Session, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := rt.NewSession(ctx, musepi.WithModel("p/m"), musepi.WithSessionID(fmt.Sprintf("s%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		sessions = append(sessions, s)
		if each != nil {
			each(s)
		}
	}
	if err := clk.WaitIdle(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	return sessions
}

// BenchmarkIdleSession reports the heap and goroutines one idle session
// holds (its actor, registry entries), per session.
func BenchmarkIdleSession(b *testing.B) {
	clk := clock.NewVirtual(time.Unix(0, 0))
	rt := newRuntime(b, clk, provider.NewScripted(), retry.DefaultSettings())
	ctx := context.Background()
	g0, h0 := runtime.NumGoroutine(), memstat.Collected().HeapAlloc
	sessions := startSessions(b, ctx, clk, rt, nil)
	time.Sleep(10 * time.Millisecond) // let mailbox goroutines park and exit
	h1, g1 := memstat.Collected().HeapAlloc, runtime.NumGoroutine()
	b.ReportMetric(float64(int64(h1)-int64(h0))/float64(b.N), "heapB/session")
	b.ReportMetric(float64(g1-g0)/float64(b.N), "goroutines/session")
	runtime.KeepAlive(sessions)
}

// BenchmarkWaitingSession reports the memory (heap and goroutine stacks)
// one session holds while its prompt waits in its first backoff, the
// session included: what the storm measures at mid-outage, per session.
// The prompts' context can end, as the storm's (and most callers') can.
func BenchmarkWaitingSession(b *testing.B) {
	clk := clock.NewVirtual(time.Unix(0, 0))
	p := provider.NewScripted(provider.Outcome{Message: provider.Failure(503, "503 Service Unavailable", nil)})
	rt := newRuntime(b, clk, p, retry.DefaultSettings())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var finished atomic.Int64
	done := func(*musepi.AssistantMessage, error) { finished.Add(1) }
	m0 := memstat.InUse()
	sessions := startSessions(b, ctx, clk, rt, func(s *musepi.Session) { s.PromptAsync(ctx, "hi", done) })
	time.Sleep(10 * time.Millisecond) // let mailbox goroutines park and exit
	m1 := memstat.InUse()
	if n := finished.Load(); n != 0 {
		b.Fatalf("%d prompts finished before their first backoff ended", n)
	}
	if n := rt.Stats().ByPhase["backoff"]; n != b.N {
		b.Fatalf("%d sessions in backoff, want every one (%d)", n, b.N)
	}
	b.ReportMetric(float64(int64(m1)-int64(m0))/float64(b.N), "heapB/session")
	runtime.KeepAlive(sessions)
}

// BenchmarkRetryAttempt is one retry attempt end to end through the actors
// (turn fails, the session core decides, the timer service's backoff, continue) on
// the virtual clock, with the default settings (model fallback on, no
// fallback chain): ns and protocol messages per attempt.
func BenchmarkRetryAttempt(b *testing.B) { retryAttempt(b) }

// BenchmarkRetryAttemptDurable is BenchmarkRetryAttempt on a memory store
// that keeps records (history.WithRecords): each attempt also encodes and
// commits the session's record, what a durable chain adds in the process
// (a database adds its round trip: see cluster/pgstore's
// BenchmarkAttemptWrites).
func BenchmarkRetryAttemptDurable(b *testing.B) {
	retryAttempt(b, musepi.WithHistoryStore(history.NewMemoryStore(history.WithRecords())))
}

// retryAttempt runs BenchmarkRetryAttempt on a runtime with opts.
func retryAttempt(b *testing.B, opts ...musepi.Option) {
	clk := &countingClock{Virtual: clock.NewVirtual(time.Unix(0, 0))}
	p := provider.NewScripted(provider.Outcome{Message: provider.Failure(503, "503 Service Unavailable", nil)})
	s := retry.DefaultSettings()
	s.MaxRetries = b.N
	rt := newRuntime(b, clk, p, s, opts...)
	ctx := context.Background()
	sess, err := rt.NewSession(ctx, musepi.WithModel("p/m"))
	if err != nil {
		b.Fatal(err)
	}
	if err := clk.WaitIdle(ctx); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	b.ResetTimer()
	begins0, steps0 := clk.begins.Load(), rt.Stats().Steps
	go func() {
		_, err := sess.Prompt(ctx, "hi")
		done <- err
	}()
	for sess.Generation() == 0 {
		runtime.Gosched()
	}
	if err := clk.RunUntilIdle(ctx); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err == nil {
		b.Fatal("the prompt should fail after maxRetries")
	}
	b.StopTimer()
	turns := int64(b.N + 1)
	work := clk.begins.Load() - begins0 - turns // one Begin per turn is the stream goroutine
	b.ReportMetric(float64(work)/float64(b.N), "msgs/attempt")
	// Less the prompt's own step and the last turn's end, after which
	// nothing is retried: b.N attempts of a turn's end and a backoff's end.
	b.ReportMetric(float64(rt.Stats().Steps-steps0-2)/float64(b.N), "steps/attempt")
}
