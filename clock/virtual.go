package clock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/musepi/musepi/internal/timeheap"
)

// Virtual is a clock that moves only when told. Timers fire in deadline
// order from Advance and RunUntilIdle, each once all work in flight (Begin
// without End) has finished, so a whole actor system runs deterministically
// in order of virtual time, without sleeping.
type Virtual struct {
	mu   sync.Mutex
	idle *sync.Cond // signalled under mu when busy drops to 0
	// elapsed is the virtual time, as an offset from origin: read without
	// the lock (Now, on every message), written under it.
	elapsed atomic.Int64
	busy    atomic.Int64 // work in flight (Begin without End)
	// timers are ordered by their deadline's offset from origin.
	timers timeheap.Heap[timerRef]
	// stopped counts the stale entries of the heap (timers stopped, or
	// reset to another deadline, while in it): they stay there until they
	// come up (or the heap is compacted), so that Stop and Reset cost no
	// heap removal.
	stopped int
	batch   time.Duration // see SetResolution
	origin  time.Time     // the start
}

// NewVirtual returns a virtual clock standing at start.
func NewVirtual(start time.Time) *Virtual {
	v := &Virtual{origin: start}
	v.idle = sync.NewCond(&v.mu)
	return v
}

// SetResolution makes timers fire in batches: every timer due within d of
// the earliest pending one fires together, in deadline order, with the clock
// standing at the latest of them, before the clock waits for the work they
// start. A storm of 100,000 jittered timers then runs in parallel rather
// than one timer at a time; each timer fires at most d late. The default, 0,
// fires one timer at a time, exactly on time.
func (v *Virtual) SetResolution(d time.Duration) {
	v.mu.Lock()
	v.batch = max(d, 0)
	v.mu.Unlock()
}

// Now returns the virtual time.
func (v *Virtual) Now() time.Time {
	return v.origin.Add(time.Duration(v.elapsed.Load()))
}

// moveTo moves the clock to t if it is later; v.mu is held.
func (v *Virtual) moveTo(t time.Time) {
	if d := int64(t.Sub(v.origin)); d > v.elapsed.Load() {
		v.elapsed.Store(d)
	}
}

// AfterFunc schedules f at Now()+d; d <= 0 fires at the current instant, on
// the next advance.
func (v *Virtual) AfterFunc(d time.Duration, f func()) Timer {
	v.mu.Lock()
	defer v.mu.Unlock()
	t := &virtualTimer{v: v, f: f}
	v.push(t, d)
	return t
}

// push puts t in the heap, pending at Now()+d; v.mu is held.
func (v *Virtual) push(t *virtualTimer, d time.Duration) {
	t.at, t.state = v.Now().Add(max(d, 0)), pending
	v.timers.Push(int64(t.at.Sub(v.origin)), timerRef{t, t.gen})
}

// Begin records work in flight.
func (v *Virtual) Begin() { v.busy.Add(1) }

// End records finished work; it panics on an End without Begin, which is
// a bug in the caller.
func (v *Virtual) End() {
	switch n := v.busy.Add(-1); {
	case n < 0:
		v.busy.Add(1)
		panic("clock: End without Begin")
	case n == 0: // under the lock, so that a WaitIdle that saw it busy is waiting
		v.mu.Lock()
		v.idle.Broadcast()
		v.mu.Unlock()
	}
}

// Pending is the number of timers not yet fired or stopped.
func (v *Virtual) Pending() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.timers.Len() - v.stopped
}

// WaitIdle blocks until no work is in flight, or ctx ends.
func (v *Virtual) WaitIdle(ctx context.Context) error {
	if ctx.Done() != nil { // a context that can end wakes the wait (none: no cost per wait)
		stop := context.AfterFunc(ctx, func() {
			v.mu.Lock()
			v.idle.Broadcast()
			v.mu.Unlock()
		})
		defer stop()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for v.busy.Load() > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		v.idle.Wait()
	}
	return nil
}

// Advance moves the clock forward by d, firing every timer due by then in
// deadline order, each after the work in flight has finished.
func (v *Virtual) Advance(ctx context.Context, d time.Duration) error {
	until := v.Now().Add(d)
	for {
		if err := v.WaitIdle(ctx); err != nil {
			return err
		}
		if !v.fireNext(until) {
			break
		}
	}
	v.mu.Lock()
	v.moveTo(until)
	v.mu.Unlock()
	return v.WaitIdle(ctx)
}

// RunUntilIdle fires timers in deadline order, moving the clock to each,
// until no timer is pending and no work is in flight, or ctx ends.
func (v *Virtual) RunUntilIdle(ctx context.Context) error {
	for {
		if err := v.WaitIdle(ctx); err != nil {
			return err
		}
		if !v.fireNext(time.Time{}) {
			return nil
		}
	}
}

// fireNext fires the earliest timer due by until (any timer when until is
// zero), with the timers batched with it (SetResolution), and reports
// whether there was one.
func (v *Virtual) fireNext(until time.Time) bool {
	v.mu.Lock()
	v.dropStopped()
	if v.timers.Len() == 0 || (!until.IsZero() && v.timers.Peek().Value.t.at.After(until)) {
		v.mu.Unlock()
		return false
	}
	last := v.timers.Peek().Value.t.at.Add(v.batch)
	if !until.IsZero() && last.After(until) {
		last = until
	}
	var due []*virtualTimer // the first is live: dropStopped cleared the top
	for v.timers.Len() > 0 && (len(due) == 0 || (v.batch > 0 && !v.timers.Peek().Value.t.at.After(last))) {
		ref := v.timers.Pop().Value
		if ref.stale() {
			v.stopped--
			continue
		}
		t := ref.t
		t.state = firing
		v.moveTo(t.at)
		due = append(due, t)
	}
	v.busy.Add(1)
	v.mu.Unlock()
	defer v.End()
	for _, t := range due {
		v.mu.Lock()
		run := t.state == firing // not stopped or reset by an earlier timer of the batch
		if run {
			t.state = fired
		}
		v.mu.Unlock()
		if run {
			t.f()
		}
	}
	return true
}

// dropStopped pops the stopped timers off the top of the heap, and
// rebuilds it without them once they are half of it; v.mu is held.
func (v *Virtual) dropStopped() {
	for v.timers.Len() > 0 && v.timers.Peek().Value.stale() {
		v.timers.Pop()
		v.stopped--
	}
	if v.stopped > 64 && v.stopped*2 > v.timers.Len() {
		v.timers.Keep(func(r timerRef) bool { return !r.stale() })
		v.stopped = 0
	}
}

// The states of a virtual timer.
const (
	pending = iota // in the heap
	firing         // popped in a batch, not yet run
	fired          // run, or stopped once out of the heap
	stopped        // stopped while in the heap, which drops it lazily
)

type virtualTimer struct {
	v     *Virtual
	at    time.Time
	state int
	gen   uint32 // its heap entries' generation: a Reset makes the older stale
	f     func()
}

// timerRef is a heap entry's timer, of the generation it was pushed with.
type timerRef struct {
	t   *virtualTimer
	gen uint32
}

// stale reports whether the entry no longer stands for its timer: the
// timer was stopped, or reset to another deadline. v.mu is held.
func (r timerRef) stale() bool { return r.gen != r.t.gen || r.t.state != pending }

// Reset makes the timer fire d from now, once.
func (t *virtualTimer) Reset(d time.Duration) bool {
	v := t.v
	v.mu.Lock()
	defer v.mu.Unlock()
	was := t.state == pending
	if was {
		v.stopped++ // its entry goes stale
	}
	t.gen++
	v.push(t, d)
	return was
}

// Stop prevents the call, if it is still to come.
func (t *virtualTimer) Stop() bool {
	t.v.mu.Lock()
	defer t.v.mu.Unlock()
	switch t.state {
	case pending:
		t.state = stopped
		t.v.stopped++
		return true
	case firing:
		t.state = fired
		return true
	}
	return false
}
