// Package clock gives the runtime its time: the real wall clock, or a
// virtual clock that tests and storm simulations advance by hand.
package clock

import (
	"time"
)

// Clock tells the time, runs timers, and tracks in-flight work so that a
// virtual clock only moves when everything scheduled at the current instant
// has run.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine (real) or from Advance (virtual)
	// once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
	// Begin records that a unit of work (a message, a stream, a delivery)
	// is in flight; End records that it finished.
	Begin()
	End()
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call; it reports whether it stopped a pending call.
	Stop() bool
	// Reset makes the call happen d from now (once), stopped or fired
	// before or not, and reports whether it was pending: the same timer
	// serves again, with no new one to allocate. A call already under way
	// may still finish.
	Reset(d time.Duration) bool
}

// Real is the wall clock. Begin and End cost nothing.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Begin does nothing on the wall clock.
func (Real) Begin() {}

// End does nothing on the wall clock.
func (Real) End() {}
