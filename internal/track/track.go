// Package track counts MusePi protocol messages in flight on a clock, so a
// virtual clock advances only when every actor has handled what it was sent.
// Every Message sent to an actor goes through Send, Request, RequestFrom or
// RequestFuture; the receiving actor's mailbox (internal/mailbox) ends it
// once handled.
package track

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
)

// Message is a message MusePi's actors exchange: from its send until its
// receiver has handled it, it counts as work in flight on the runtime's
// clock. A type is one by its empty Tracked method, which the compiler
// checks wherever a message is sent through this package.
type Message interface {
	// Tracked marks the type as a MusePi actor message; it does nothing.
	Tracked()
}

// Sender is the part of an actor or root context that sends.
type Sender interface {
	Send(pid *actor.PID, message interface{})
	Request(pid *actor.PID, message interface{})
}

// Send sends msg to pid, counting it in flight on clk.
func Send(s Sender, clk clock.Clock, pid *actor.PID, msg Message) {
	clk.Begin()
	s.Send(pid, msg)
}

// Request sends msg to pid with the sender attached, counting it in flight.
func Request(s Sender, clk clock.Clock, pid *actor.PID, msg Message) {
	clk.Begin()
	s.Request(pid, msg)
}

// RequestFrom sends msg to pid from the root context with sender as its
// reply address, counting it in flight.
func RequestFrom(root *actor.RootContext, clk clock.Clock, pid *actor.PID, msg Message, sender *actor.PID) {
	clk.Begin()
	root.RequestWithCustomSender(pid, msg, sender)
}

// RequestFuture sends msg from the root context and returns a future for the
// reply; the reply itself, sent to the future, is not counted. timeout < 0
// means none.
func RequestFuture(root *actor.RootContext, clk clock.Clock, pid *actor.PID, msg Message, timeout time.Duration) *actor.Future {
	clk.Begin()
	return root.RequestFuture(pid, msg, timeout)
}

// Counted reports whether msg is a Message, counted in flight until handled.
func Counted(msg interface{}) bool {
	_, ok := msg.(Message)
	return ok
}
