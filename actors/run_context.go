package actors

import (
	"context"
	"slices"
	"sync"
	"time"
)

// runContext is the context a turn's stream or a session's tools run
// under, and how the session cancels them: a context.WithCancelCause of
// the background context that costs no allocation of its own inside a
// turn (and one for tools), where the context package's takes two (the
// context and its cancel function).
//
// It implements the method the context package looks for on a parent
// (AfterFunc), so a context derived from it (a request timeout, an HTTP
// request's) is cancelled with it without a goroutine of its own, as one
// derived from a context.WithCancel is. The cause it was cancelled with is
// cancelCause's: context.Cause knows only the context package's own
// contexts, and reports context.Canceled for a runContext and those
// derived from it.
type runContext struct {
	mu     sync.Mutex
	done   chan struct{} // made by the first Done, closed by cancel
	cause  error         // why it was cancelled (nil: it was not)
	after  []afterCancel // what AfterFunc registered, called by cancel
	lastID uint64        // of the last registration
}

// closedChan is the Done channel of a runContext cancelled before anyone
// asked for one.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// afterCancel is a function registered with AfterFunc, to call once the
// context is cancelled, and the id its stop function knows it by.
type afterCancel struct {
	id uint64
	f  func()
}

// Deadline reports no deadline: a runContext ends by cancellation only.
func (c *runContext) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is closed by cancel.
func (c *runContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.cause != nil {
			return closedChan
		}
		c.done = make(chan struct{})
	}
	return c.done
}

// Err is context.Canceled once cancelled, nil before.
func (c *runContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause != nil {
		return context.Canceled
	}
	return nil
}

// Value is nil for every key: a runContext carries no values.
func (c *runContext) Value(any) any { return nil }

// AfterFunc calls f once the context is cancelled (in its own goroutine
// when it already is); stop unregisters f, reporting whether it did so
// before f was called. The context package registers the cancellation of a derived
// context this way: cancel calls those directly, as a cancelCtx cancels
// its children.
func (c *runContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause != nil {
		go f() // the caller may hold a lock f takes (a derived context's)
		return func() bool { return false }
	}
	c.lastID++
	id := c.lastID
	c.after = append(c.after, afterCancel{id: id, f: f})
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.IndexFunc(c.after, func(a afterCancel) bool { return a.id == id })
		if i < 0 {
			return false // called, or being called
		}
		c.after = slices.Delete(c.after, i, i+1)
		return true
	}
}

// cancel ends the context with cause (context.Canceled when nil); after the
// first call it does nothing.
func (c *runContext) cancel(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	c.mu.Lock()
	if c.cause != nil {
		c.mu.Unlock()
		return
	}
	c.cause = cause
	if c.done != nil {
		close(c.done)
	}
	after := c.after
	c.after = nil
	c.mu.Unlock()
	for _, a := range after {
		a.f()
	}
}

// cancelCause is what the context was cancelled with (nil: it was not).
func (c *runContext) cancelCause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}
