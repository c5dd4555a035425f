// Package track counts MusePi protocol messages in flight on a clock, so a
// virtual clock advances only when every actor has handled what it was sent.
// Every musepi.v1 message sent to an actor goes through Send (or Begin before
// a custom send); the receiving actor's mailbox (internal/mailbox) ends it once handled.
package track

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/clock"
)

// protocolPackage is the protobuf package of MusePi messages.
const protocolPackage = "musepi.v1"

// Sender is the part of an actor or root context that sends.
type Sender interface {
	Send(pid *actor.PID, message interface{})
	Request(pid *actor.PID, message interface{})
}

// Send sends msg to pid, counting it in flight on clk.
func Send(s Sender, clk clock.Clock, pid *actor.PID, msg proto.Message) {
	clk.Begin()
	s.Send(pid, msg)
}

// Request sends msg to pid with the sender attached, counting it in flight.
func Request(s Sender, clk clock.Clock, pid *actor.PID, msg proto.Message) {
	clk.Begin()
	s.Request(pid, msg)
}

// RequestFuture sends msg from the root context and returns a future for the
// reply; the reply itself, sent to the future, is not counted. timeout < 0
// means none.
func RequestFuture(root *actor.RootContext, clk clock.Clock, pid *actor.PID, msg proto.Message, timeout time.Duration) *actor.Future {
	clk.Begin()
	return root.RequestFuture(pid, msg, timeout)
}

// IsProtocol reports whether msg is a MusePi protocol message.
func IsProtocol(msg interface{}) bool {
	m, ok := msg.(proto.Message)
	return ok && m.ProtoReflect().Descriptor().ParentFile().Package() == protocolPackage
}
