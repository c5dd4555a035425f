// Package track counts MusePi protocol messages in flight on a clock, so a
// virtual clock advances only when every actor has handled what it was sent.
// Every musepi.v1 message sent to an actor goes through Send (or Begin before
// a custom send); the receiving actor's Middleware ends it once handled.
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

// Middleware ends each protocol message on clk once the actor has handled
// it. A message whose handler panics stays in flight until supervision has
// restarted the actor (its Started has been handled) or stopped it, so a
// virtual clock does not move while the actor is being restarted. Use one
// Middleware per actor (per Props).
func Middleware(clk clock.Clock) actor.ReceiverMiddleware {
	held := 0 // messages whose handler panicked; touched only by the actor's goroutine
	return func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
			switch env.Message.(type) {
			case *actor.Started, *actor.Stopped:
				next(ctx, env)
				for ; held > 0; held-- {
					clk.End()
				}
				return
			}
			if !IsProtocol(env.Message) {
				next(ctx, env)
				return
			}
			defer func() {
				if r := recover(); r != nil {
					held++
					panic(r)
				}
				clk.End()
			}()
			next(ctx, env)
		}
	}
}
