// Package reply is the runtime's one-shot reply addresses: a process in
// an actor system's registry whose first reply goes to a Replier, a future
// without a waiting goroutine. The runtime's prompts and the cluster's
// session handles use them.
package reply

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/musepi/musepi/messages/protocol"
)

// ErrNoSession is the error of a reply address whose message went to a
// session that no longer exists.
var ErrNoSession = errors.New("session is gone")

// Replier takes what a reply address receives.
type Replier interface {
	// Replied takes the reply, or ErrNoSession (the message went to no
	// session, or the address was stopped); it ends the address.
	Replied(res interface{}, err error)
	// AcceptedAt takes a PromptAccepted's generation, which does not end
	// the address.
	AcceptedAt(generation uint64)
}

// Func is a Replier that takes the reply only.
type Func func(res interface{}, err error)

// Replied calls f.
func (f Func) Replied(res interface{}, err error) { f(res, err) }

// AcceptedAt does nothing.
func (Func) AcceptedAt(uint64) {}

// Address is a one-shot reply address: a process in the actor system's
// registry whose first reply goes to its Replier and unregisters it. It
// is a future without a waiting goroutine; what takes the reply may embed
// it, so that the address costs no allocation of its own.
type Address struct {
	system *actor.ActorSystem
	to     Replier
	pid    actor.PID
	ended  atomic.Bool
}

// ids numbers the reply addresses ("reply$N", unique in every registry:
// nothing else registers that name).
var ids atomic.Uint64

// New registers a reply address for to and returns its PID.
func New(system *actor.ActorSystem, to Replier) *actor.PID {
	return new(Address).Register(system, to)
}

// Register adds the address to system's registry, replying to to, and
// returns its PID. It is the registry's Add without the PID Add allocates
// (the address holds its own) and with the id made in one allocation.
func (a *Address) Register(system *actor.ActorSystem, to Replier) *actor.PID {
	var buf [32]byte
	id := string(strconv.AppendUint(append(buf[:0], "reply$"...), ids.Add(1), 36))
	reg := system.ProcessRegistry
	a.system, a.to = system, to
	a.pid.Address, a.pid.Id = reg.Address, id
	reg.LocalPIDs.GetBucket(id).SetIfAbsent(id, a)
	return &a.pid
}

// SendUserMessage delivers the reply (a dead letter: the session was gone).
func (a *Address) SendUserMessage(_ *actor.PID, message interface{}) {
	_, msg, _ := actor.UnwrapEnvelope(message)
	switch m := msg.(type) {
	case *actor.DeadLetterResponse:
		a.end(nil, ErrNoSession)
	case *protocol.PromptAccepted:
		a.to.AcceptedAt(m.GetGeneration())
	default:
		a.end(msg, nil)
	}
}

// SendSystemMessage is ignored: a reply address watches nothing.
func (a *Address) SendSystemMessage(*actor.PID, interface{}) {}

// Stop unregisters the address without a reply.
func (a *Address) Stop(*actor.PID) { a.end(nil, ErrNoSession) }

// end unregisters the address and hands its replier the reply, once.
func (a *Address) end(res interface{}, err error) {
	if !a.ended.CompareAndSwap(false, true) {
		return
	}
	a.system.ProcessRegistry.Remove(&a.pid)
	a.to.Replied(res, err)
}

// Wait waits for f's result until ctx ends.
func Wait(ctx context.Context, f *actor.Future) (interface{}, error) {
	type result struct {
		res interface{}
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := f.Result()
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
