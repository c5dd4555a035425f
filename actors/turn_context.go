package actors

import (
	"context"
	"slices"
	"time"
)

// closedChan is the Done channel of a turn cancelled before anyone asked
// for one.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// afterCancel is a function registered with AfterFunc, to call once the
// turn is cancelled.
type afterCancel struct {
	f func()
}

// Deadline reports no deadline: a turn ends by cancellation only.
func (t *turnRun) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is closed when the turn is cancelled.
func (t *turnRun) Done() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done == nil {
		if t.cause != nil {
			return closedChan
		}
		t.done = make(chan struct{})
	}
	return t.done
}

// Err is context.Canceled once the turn is cancelled, nil before.
func (t *turnRun) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cause != nil {
		return context.Canceled
	}
	return nil
}

// Value is nil for every key: a turn carries no values.
func (t *turnRun) Value(any) any { return nil }

// AfterFunc calls f once the turn is cancelled (in its own goroutine when
// it already is); stop unregisters f, reporting whether it did so before f
// was called. The context package registers the cancellation of a derived
// context this way: cancel calls those directly, as a cancelCtx cancels
// its children.
func (t *turnRun) AfterFunc(f func()) (stop func() bool) {
	a := &afterCancel{f: f}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cause != nil {
		go f() // the caller may hold a lock f takes (a derived context's)
		return func() bool { return false }
	}
	t.after = append(t.after, a)
	return func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		i := slices.Index(t.after, a)
		if i < 0 {
			return false // called, or being called
		}
		t.after = slices.Delete(t.after, i, i+1)
		return true
	}
}

// cancel ends the turn with cause (context.Canceled when nil); after the
// first call it does nothing.
func (t *turnRun) cancel(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	t.mu.Lock()
	if t.cause != nil {
		t.mu.Unlock()
		return
	}
	t.cause = cause
	if t.done != nil {
		close(t.done)
	}
	after := t.after
	t.after = nil
	t.mu.Unlock()
	for _, a := range after {
		a.f()
	}
}

// cancelCause is what the turn was cancelled with (nil: it was not).
func (t *turnRun) cancelCause() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cause
}

// canceller is what a session cancels: a turn, or its tools.
type canceller interface {
	cancel(cause error)
}

// cancelFunc is a context's cancel function as a canceller (the tools').
type cancelFunc context.CancelCauseFunc

func (f cancelFunc) cancel(cause error) { f(cause) }
