package clock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Virtual is a clock that moves only when told. Timers fire in deadline
// order from Advance and RunUntilIdle, each once all work in flight (Begin
// without End) has finished, so a whole actor system runs deterministically
// in order of virtual time, without sleeping.
type Virtual struct {
	mu     sync.Mutex
	idle   *sync.Cond
	now    time.Time
	busy   int
	seq    uint64
	timers timerHeap
	batch  time.Duration // see SetResolution
	origin time.Time     // the start: timers are ordered by their offset from it
}

// NewVirtual returns a virtual clock standing at start.
func NewVirtual(start time.Time) *Virtual {
	v := &Virtual{now: start, origin: start}
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
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

// AfterFunc schedules f at Now()+d; d <= 0 fires at the current instant, on
// the next advance.
func (v *Virtual) AfterFunc(d time.Duration, f func()) Timer {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seq++
	at := v.now.Add(max(d, 0))
	t := &virtualTimer{v: v, at: at, off: at.Sub(v.origin), seq: v.seq, f: f}
	heap.Push(&v.timers, t)
	return t
}

// Begin records work in flight.
func (v *Virtual) Begin() {
	v.mu.Lock()
	v.busy++
	v.mu.Unlock()
}

// End records finished work; it panics on an End without Begin, which is
// a bug in the caller.
func (v *Virtual) End() {
	v.mu.Lock()
	if v.busy == 0 {
		v.mu.Unlock()
		panic("clock: End without Begin")
	}
	v.busy--
	if v.busy == 0 {
		v.idle.Broadcast()
	}
	v.mu.Unlock()
}

// Pending is the number of timers not yet fired or stopped.
func (v *Virtual) Pending() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.timers)
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
	for v.busy > 0 {
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
	v.mu.Lock()
	until := v.now.Add(d)
	v.mu.Unlock()
	for {
		if err := v.WaitIdle(ctx); err != nil {
			return err
		}
		if !v.fireNext(until) {
			break
		}
	}
	v.mu.Lock()
	if until.After(v.now) {
		v.now = until
	}
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
	if len(v.timers) == 0 || (!until.IsZero() && v.timers[0].at.After(until)) {
		v.mu.Unlock()
		return false
	}
	last := v.timers[0].at.Add(v.batch)
	if !until.IsZero() && last.After(until) {
		last = until
	}
	var due []*virtualTimer
	for len(v.timers) > 0 && (len(due) == 0 || (v.batch > 0 && !v.timers[0].at.After(last))) {
		t := heap.Pop(&v.timers).(*virtualTimer)
		t.index = firing
		if t.at.After(v.now) {
			v.now = t.at
		}
		due = append(due, t)
	}
	v.busy++
	v.mu.Unlock()
	defer v.End()
	for _, t := range due {
		v.mu.Lock()
		stopped := t.index != firing // stopped by an earlier timer of the batch
		t.index = fired
		v.mu.Unlock()
		if !stopped {
			t.f()
		}
	}
	return true
}

// The index of a timer out of the heap: popped in a batch not yet run, or
// run (or stopped).
const (
	fired  = -1
	firing = -2
)

type virtualTimer struct {
	v     *Virtual
	at    time.Time
	off   time.Duration // at - origin, for cheap ordering
	seq   uint64
	index int
	f     func()
}

func (t *virtualTimer) Stop() bool {
	t.v.mu.Lock()
	defer t.v.mu.Unlock()
	switch t.index {
	case fired:
		return false
	case firing:
		t.index = fired
		return true
	}
	heap.Remove(&t.v.timers, t.index)
	t.index = fired
	return true
}

type timerHeap []*virtualTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].off == h[j].off {
		return h[i].seq < h[j].seq
	}
	return h[i].off < h[j].off
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*virtualTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
