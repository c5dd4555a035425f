package clock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musepi/musepi/clock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	_ clock.Clock = clock.Real{}
	_ clock.Clock = (*clock.Virtual)(nil)
)

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// log records timer firings as "name@offset" where offset is Now()-start.
type log struct {
	v     *clock.Virtual
	mu    sync.Mutex
	lines []string
}

func (l *log) add(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf("%s@%v", name, l.v.Now().Sub(start)))
}

func (l *log) fn(name string) func() { return func() { l.add(name) } }

func (l *log) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

func newLog() (*clock.Virtual, *log) {
	v := clock.NewVirtual(start)
	return v, &log{v: v}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type timerSpec struct {
	name string
	d    time.Duration
}

func TestTimersFireInDeadlineOrder(t *testing.T) {
	tests := []struct {
		name   string
		timers []timerSpec
		want   []string
	}{
		{"deadline order", []timerSpec{{"c", 3 * time.Second}, {"a", time.Second}, {"b", 2 * time.Second}},
			[]string{"a@1s", "b@2s", "c@3s"}},
		{"ties in creation order", []timerSpec{{"x", time.Second}, {"y", time.Second}, {"w", 0}, {"z", time.Second}},
			[]string{"w@0s", "x@1s", "y@1s", "z@1s"}},
		{"zero and negative fire now", []timerSpec{{"later", time.Millisecond}, {"neg", -5 * time.Second}, {"zero", 0}},
			[]string{"neg@0s", "zero@0s", "later@1ms"}},
	}
	runs := map[string]func(context.Context, *clock.Virtual) error{
		"Advance":      func(ctx context.Context, v *clock.Virtual) error { return v.Advance(ctx, time.Minute) },
		"RunUntilIdle": func(ctx context.Context, v *clock.Virtual) error { return v.RunUntilIdle(ctx) },
	}
	for _, tt := range tests {
		for runName, run := range runs {
			t.Run(tt.name+"/"+runName, func(t *testing.T) {
				v, l := newLog()
				for _, s := range tt.timers {
					v.AfterFunc(s.d, l.fn(s.name))
				}
				if n := v.Pending(); n != len(tt.timers) {
					t.Fatalf("Pending = %d, want %d", n, len(tt.timers))
				}
				if got := l.got(); len(got) != 0 {
					t.Fatalf("fired before advancing: %v", got)
				}
				if err := run(ctxT(t), v); err != nil {
					t.Fatal(err)
				}
				if got := l.got(); !slices.Equal(got, tt.want) {
					t.Errorf("fired %v, want %v", got, tt.want)
				}
				if n := v.Pending(); n != 0 {
					t.Errorf("Pending = %d after run", n)
				}
			})
		}
	}
}

func TestRunUntilIdleLeavesNowAtLastDeadline(t *testing.T) {
	v, l := newLog()
	v.AfterFunc(2*time.Second, l.fn("a"))
	v.AfterFunc(7*time.Second, l.fn("b"))
	if err := v.RunUntilIdle(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := v.Now().Sub(start); got != 7*time.Second {
		t.Errorf("Now = start+%v, want start+7s", got)
	}
}

func TestAdvanceFiresOnlyDueTimers(t *testing.T) {
	v, l := newLog()
	for _, s := range []timerSpec{{"a", time.Second}, {"b", 2 * time.Second}, {"c", 3 * time.Second}} {
		v.AfterFunc(s.d, l.fn(s.name))
	}
	steps := []struct {
		d       time.Duration
		want    []string
		now     time.Duration
		pending int
	}{
		{0, nil, 0, 3},
		{500 * time.Millisecond, nil, 500 * time.Millisecond, 3},
		{1500 * time.Millisecond, []string{"a@1s", "b@2s"}, 2 * time.Second, 1},
		{5 * time.Second, []string{"a@1s", "b@2s", "c@3s"}, 7 * time.Second, 0},
		{time.Second, []string{"a@1s", "b@2s", "c@3s"}, 8 * time.Second, 0},
	}
	ctx := ctxT(t)
	for i, s := range steps {
		if err := v.Advance(ctx, s.d); err != nil {
			t.Fatal(err)
		}
		if got := l.got(); !slices.Equal(got, s.want) {
			t.Errorf("step %d: fired %v, want %v", i, got, s.want)
		}
		if got := v.Now().Sub(start); got != s.now {
			t.Errorf("step %d: Now = start+%v, want start+%v", i, got, s.now)
		}
		if got := v.Pending(); got != s.pending {
			t.Errorf("step %d: Pending = %d, want %d", i, got, s.pending)
		}
	}
}

func TestZeroDelayFiresOnNextAdvanceAtCurrentInstant(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Hour} {
		t.Run(d.String(), func(t *testing.T) {
			v, l := newLog()
			ctx := ctxT(t)
			if err := v.Advance(ctx, 3*time.Second); err != nil {
				t.Fatal(err)
			}
			v.AfterFunc(d, l.fn("now"))
			if got := l.got(); len(got) != 0 {
				t.Fatalf("fired synchronously: %v", got)
			}
			if err := v.Advance(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if got, want := l.got(), []string{"now@3s"}; !slices.Equal(got, want) {
				t.Errorf("fired %v, want %v", got, want)
			}
		})
	}
}

func TestStop(t *testing.T) {
	tests := []struct {
		name      string
		fireFirst bool
		wantStop  bool
		wantFired []string
	}{
		{"before firing", false, true, []string{"keep@1s"}},
		{"after firing", true, false, []string{"stop@1s", "keep@1s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, l := newLog()
			ctx := ctxT(t)
			tm := v.AfterFunc(time.Second, l.fn("stop"))
			v.AfterFunc(time.Second, l.fn("keep"))
			if tt.fireFirst {
				if err := v.Advance(ctx, time.Second); err != nil {
					t.Fatal(err)
				}
			}
			if got := tm.Stop(); got != tt.wantStop {
				t.Errorf("Stop = %v, want %v", got, tt.wantStop)
			}
			if got := tm.Stop(); got {
				t.Errorf("second Stop = true, want false")
			}
			if err := v.RunUntilIdle(ctx); err != nil {
				t.Fatal(err)
			}
			if got := l.got(); !slices.Equal(got, tt.wantFired) {
				t.Errorf("fired %v, want %v", got, tt.wantFired)
			}
		})
	}
}

func TestStopKeepsOrderOfOthers(t *testing.T) {
	v, l := newLog()
	var timers []clock.Timer
	for i := range 8 {
		timers = append(timers, v.AfterFunc(time.Duration(8-i)*time.Second, l.fn(fmt.Sprint(8-i))))
	}
	for _, i := range []int{0, 3, 5} { // the 8s, 5s and 3s timers
		if !timers[i].Stop() {
			t.Fatalf("Stop of timer %d = false", i)
		}
	}
	if n := v.Pending(); n != 5 {
		t.Fatalf("Pending = %d, want 5", n)
	}
	if err := v.RunUntilIdle(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	want := []string{"1@1s", "2@2s", "4@4s", "6@6s", "7@7s"}
	if got := l.got(); !slices.Equal(got, want) {
		t.Errorf("fired %v, want %v", got, want)
	}
}

func TestCallbackSchedulingIsHonoured(t *testing.T) {
	v, l := newLog()
	v.AfterFunc(time.Second, func() {
		l.add("a")
		v.AfterFunc(time.Second, func() {
			l.add("b")
			v.AfterFunc(0, l.fn("c"))
		})
		v.AfterFunc(-time.Second, l.fn("a-now"))
	})
	if err := v.RunUntilIdle(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	want := []string{"a@1s", "a-now@1s", "b@2s", "c@2s"}
	if got := l.got(); !slices.Equal(got, want) {
		t.Errorf("fired %v, want %v", got, want)
	}
}

// A callback's asynchronous work (Begin in the callback, End elsewhere)
// finishes before the next timer fires, even at the same instant.
func TestTimersWaitForWorkInFlight(t *testing.T) {
	v, l := newLog()
	var wg sync.WaitGroup
	v.AfterFunc(time.Second, func() {
		l.add("a")
		v.Begin()
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(20 * time.Millisecond)
			l.add("a-async")
			v.End()
		}()
	})
	v.AfterFunc(time.Second, l.fn("b"))
	if err := v.RunUntilIdle(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	want := []string{"a@1s", "a-async@1s", "b@1s"}
	if got := l.got(); !slices.Equal(got, want) {
		t.Errorf("fired %v, want %v", got, want)
	}
}

// returnsWithin reports whether ch delivers within d.
func returnsWithin(ch <-chan error, d time.Duration) (error, bool) {
	select {
	case err := <-ch:
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

func TestWaitIdleBlocksUntilEnd(t *testing.T) {
	v := clock.NewVirtual(start)
	ctx := ctxT(t)
	if err := v.WaitIdle(ctx); err != nil {
		t.Fatalf("WaitIdle on an idle clock = %v", err)
	}
	v.Begin()
	v.Begin()
	done := make(chan error, 1)
	go func() { done <- v.WaitIdle(ctx) }()
	if _, ok := returnsWithin(done, 20*time.Millisecond); ok {
		t.Fatal("WaitIdle returned with two Begins in flight")
	}
	v.End()
	if _, ok := returnsWithin(done, 20*time.Millisecond); ok {
		t.Fatal("WaitIdle returned with one Begin in flight")
	}
	v.End()
	err, ok := returnsWithin(done, 5*time.Second)
	if !ok || err != nil {
		t.Fatalf("WaitIdle after End = %v (returned %v)", err, ok)
	}
}

func TestAdvanceWaitsForWorkBeforeFiring(t *testing.T) {
	v, l := newLog()
	v.AfterFunc(time.Second, l.fn("a"))
	v.Begin()
	done := make(chan error, 1)
	go func() { done <- v.Advance(ctxT(t), time.Second) }()
	if _, ok := returnsWithin(done, 20*time.Millisecond); ok {
		t.Fatal("Advance returned while work was in flight")
	}
	if got := l.got(); len(got) != 0 {
		t.Fatalf("fired while work was in flight: %v", got)
	}
	v.End()
	if err, ok := returnsWithin(done, 5*time.Second); !ok || err != nil {
		t.Fatalf("Advance = %v (returned %v)", err, ok)
	}
	if got, want := l.got(), []string{"a@1s"}; !slices.Equal(got, want) {
		t.Errorf("fired %v, want %v", got, want)
	}
}

func TestContextCancellation(t *testing.T) {
	waits := map[string]func(*clock.Virtual, context.Context) error{
		"WaitIdle":     (*clock.Virtual).WaitIdle,
		"RunUntilIdle": (*clock.Virtual).RunUntilIdle,
		"Advance":      func(v *clock.Virtual, ctx context.Context) error { return v.Advance(ctx, time.Second) },
	}
	for name, wait := range waits {
		t.Run(name, func(t *testing.T) {
			v := clock.NewVirtual(start)
			v.Begin()
			defer v.End()

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- wait(v, ctx) }()
			if _, ok := returnsWithin(done, 20*time.Millisecond); ok {
				t.Fatal("returned before cancellation")
			}
			cancel()
			err, ok := returnsWithin(done, 5*time.Second)
			if !ok {
				t.Fatal("did not return after cancellation")
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want context.Canceled", err)
			}

			// An already-ended context returns at once.
			if err := wait(v, ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("with ended ctx: err = %v, want context.Canceled", err)
			}
		})
	}
}

func TestEndWithoutBeginPanics(t *testing.T) {
	tests := []struct {
		name   string
		begins int
		ends   int
	}{
		{"no begin", 0, 1},
		{"one end too many", 2, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := clock.NewVirtual(start)
			for range tt.begins {
				v.Begin()
			}
			for range tt.ends - 1 {
				v.End()
			}
			defer func() {
				if recover() == nil {
					t.Error("End without Begin did not panic")
				}
			}()
			v.End()
		})
	}
}

func TestEndWithoutBeginLeavesClockUsable(t *testing.T) {
	v := clock.NewVirtual(start)
	func() {
		defer func() { _ = recover() }()
		v.End()
	}()
	v.Begin()
	done := make(chan error, 1)
	go func() { done <- v.WaitIdle(ctxT(t)) }()
	if _, ok := returnsWithin(done, 20*time.Millisecond); ok {
		t.Error("WaitIdle returned with a Begin in flight")
	}
	v.End() // must not panic
	if err, ok := returnsWithin(done, 5*time.Second); !ok || err != nil {
		t.Errorf("WaitIdle = %v (returned %v)", err, ok)
	}
}

func TestReal(t *testing.T) {
	var c clock.Clock = clock.Real{}
	before := time.Now()
	if now := c.Now(); now.Before(before) || now.Sub(before) > time.Minute {
		t.Errorf("Now = %v, want about %v", now, before)
	}
	c.Begin()
	c.End()
	c.End() // no bookkeeping: never panics

	fired := make(chan struct{})
	tm := c.AfterFunc(time.Millisecond, func() { close(fired) })
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("AfterFunc did not fire")
	}
	if tm.Stop() {
		t.Error("Stop after firing = true")
	}

	stopped := c.AfterFunc(time.Hour, func() { t.Error("stopped timer fired") })
	if !stopped.Stop() {
		t.Error("Stop before firing = false")
	}
}

func TestResolutionBatchesTimers(t *testing.T) {
	tests := []struct {
		name       string
		resolution time.Duration
		timers     []timerSpec
		want       []string
	}{
		{"off: each on time", 0, []timerSpec{{"a", 10 * time.Millisecond}, {"b", 10500 * time.Microsecond}, {"c", 12 * time.Millisecond}},
			[]string{"a@10ms", "b@10.5ms", "c@12ms"}},
		{"1ms: a and b together at the later deadline", time.Millisecond,
			[]timerSpec{{"a", 10 * time.Millisecond}, {"b", 10500 * time.Microsecond}, {"c", 12 * time.Millisecond}},
			[]string{"a@10.5ms", "b@10.5ms", "c@12ms"}},
		{"1ms: batch window starts at the earliest", time.Millisecond,
			[]timerSpec{{"a", 10 * time.Millisecond}, {"b", 11 * time.Millisecond}, {"c", 11500 * time.Microsecond}},
			[]string{"a@11ms", "b@11ms", "c@11.5ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, l := newLog()
			v.SetResolution(tt.resolution)
			for _, s := range tt.timers {
				v.AfterFunc(s.d, l.fn(s.name))
			}
			if err := v.RunUntilIdle(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if got := l.got(); !slices.Equal(got, tt.want) {
				t.Errorf("fired %v, want %v", got, tt.want)
			}
		})
	}
}

func TestResolutionHonoursStopWithinABatch(t *testing.T) {
	v, l := newLog()
	v.SetResolution(time.Second)
	var second clock.Timer
	v.AfterFunc(time.Millisecond, func() {
		l.add("first")
		if !second.Stop() {
			t.Error("Stop of a batched timer not yet run = false, want true")
		}
	})
	second = v.AfterFunc(2*time.Millisecond, l.fn("second"))
	if err := v.RunUntilIdle(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := l.got(); !slices.Equal(got, []string{"first@2ms"}) {
		t.Errorf("fired %v, want only first", got)
	}
	if second.Stop() {
		t.Error("second Stop = true, want false")
	}
}

func TestResolutionAdvanceStopsAtUntil(t *testing.T) {
	v, l := newLog()
	v.SetResolution(time.Second)
	v.AfterFunc(100*time.Millisecond, l.fn("a"))
	v.AfterFunc(300*time.Millisecond, l.fn("b"))
	if err := v.Advance(ctxT(t), 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := l.got(); !slices.Equal(got, []string{"a@100ms"}) {
		t.Errorf("fired %v, want only a", got)
	}
	if n := v.Pending(); n != 1 {
		t.Errorf("Pending = %d, want 1", n)
	}
}

// Stopped timers never fire nor move the clock, however many there are
// (they leave the heap lazily), and Pending counts only the live ones.
func TestVirtualManyStoppedTimers(t *testing.T) {
	start := time.Unix(0, 0)
	v := clock.NewVirtual(start)
	var fired []int
	timers := make([]clock.Timer, 1000)
	for i := range timers {
		timers[i] = v.AfterFunc(time.Duration(i+1)*time.Millisecond, func() { fired = append(fired, i) })
	}
	for i := range timers {
		if i%10 != 3 && !timers[i].Stop() {
			t.Fatalf("Stop of pending timer %d reported false", i)
		}
	}
	if timers[0].Stop() {
		t.Error("a second Stop reported true")
	}
	if n := v.Pending(); n != 100 {
		t.Fatalf("Pending = %d, want 100", n)
	}
	if err := v.RunUntilIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(fired) != 100 || fired[0] != 3 || fired[99] != 993 {
		t.Fatalf("fired %d timers, first %v, want 100 from 3 to 993", len(fired), fired[:min(3, len(fired))])
	}
	for i := 1; i < len(fired); i++ {
		if fired[i] != fired[i-1]+10 {
			t.Fatalf("fired out of order: %d after %d", fired[i], fired[i-1])
		}
	}
	if got := v.Now().Sub(start); got != 994*time.Millisecond {
		t.Errorf("clock at %v, want 994ms (the last live timer, not the stopped ones after it)", got)
	}
	if n := v.Pending(); n != 0 {
		t.Errorf("Pending = %d after the run, want 0", n)
	}
}

// Reset moves a timer to a new deadline, whatever it was doing: pending
// (its old deadline goes), stopped, or fired (it fires again). It reports
// whether the timer was pending, and the timer fires once per Reset.
func TestVirtualTimerReset(t *testing.T) {
	for _, tt := range []struct {
		name    string
		before  func(v *clock.Virtual, tm clock.Timer) // what happens to the timer (armed for 2s) first
		reset   time.Duration
		pending bool // Reset's answer
		want    []string
	}{
		{"pending, to later", func(*clock.Virtual, clock.Timer) {}, 5 * time.Second, true, []string{"t@5s"}},
		{"pending, to earlier", func(*clock.Virtual, clock.Timer) {}, time.Second, true, []string{"t@1s"}},
		{"pending, to the same time", func(*clock.Virtual, clock.Timer) {}, 2 * time.Second, true, []string{"t@2s"}},
		{"stopped", func(_ *clock.Virtual, tm clock.Timer) { tm.Stop() }, 3 * time.Second, false, []string{"t@3s"}},
		{"fired", func(v *clock.Virtual, _ clock.Timer) { _ = v.Advance(context.Background(), 2*time.Second) }, time.Second,
			false, []string{"t@2s", "t@3s"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, l := newLog()
			tm := v.AfterFunc(2*time.Second, l.fn("t"))
			tt.before(v, tm)
			if got := tm.Reset(tt.reset); got != tt.pending {
				t.Errorf("Reset = %t, want %t", got, tt.pending)
			}
			if n := v.Pending(); n != 1 {
				t.Errorf("Pending after Reset = %d, want 1", n)
			}
			if err := v.RunUntilIdle(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if got := l.got(); !slices.Equal(got, tt.want) {
				t.Errorf("fired %v, want %v", got, tt.want)
			}
			if n := v.Pending(); n != 0 {
				t.Errorf("Pending = %d after run", n)
			}
		})
	}
}

// A timer reset by an earlier timer of the same batch fires at its new
// deadline, not in the batch; many resets leave one pending timer.
func TestVirtualTimerResetInBatch(t *testing.T) {
	v, l := newLog()
	v.SetResolution(time.Second)
	var b clock.Timer
	v.AfterFunc(time.Second, func() { l.add("a"); b.Reset(10 * time.Second) })
	b = v.AfterFunc(1500*time.Millisecond, l.fn("b"))
	if err := v.RunUntilIdle(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// The batch stands at its latest deadline (1.5s): b, reset from there,
	// fires 10 s later.
	if got := l.got(); !slices.Equal(got, []string{"a@1.5s", "b@11.5s"}) {
		t.Errorf("fired %v, want [a@1.5s b@11.5s]", got)
	}
	c := v.AfterFunc(time.Hour, func() {})
	for i := range 1000 {
		c.Reset(time.Duration(i+1) * time.Minute)
	}
	if n := v.Pending(); n != 1 {
		t.Errorf("Pending after 1000 resets = %d, want 1", n)
	}
}
