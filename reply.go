package musepi

import (
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/messages"
)

// errNoSession is the error of a reply address whose message went to a
// session that no longer exists.
var errNoSession = errors.New("session is gone")

// replier takes what a reply address receives.
type replier interface {
	// replied takes the reply, or errNoSession (the message went to no
	// session, or the address was stopped); it ends the address.
	replied(res interface{}, err error)
	// acceptedAt takes a PromptAccepted's generation, which does not end
	// the address.
	acceptedAt(generation uint64)
}

// replyFunc is a replier that takes the reply only.
type replyFunc func(res interface{}, err error)

func (f replyFunc) replied(res interface{}, err error) { f(res, err) }

func (replyFunc) acceptedAt(uint64) {}

// replyAddress is a one-shot reply address: a process in the actor
// system's registry whose first reply goes to its replier and unregisters
// it. It is a future without a waiting goroutine; what takes the reply may
// embed it, so that the address costs no allocation of its own.
type replyAddress struct {
	system *actor.ActorSystem
	to     replier
	pid    actor.PID
	ended  atomic.Bool
}

// replyIDs numbers the reply addresses ("reply$N", unique in every
// registry: nothing else registers that name).
var replyIDs atomic.Uint64

// newReplyAddress registers a reply address for to and returns its PID.
func newReplyAddress(system *actor.ActorSystem, to replier) *actor.PID {
	return new(replyAddress).register(system, to)
}

// register adds the address to system's registry, replying to to, and
// returns its PID. It is the registry's Add without the PID Add allocates
// (the address holds its own) and with the id made in one allocation.
func (a *replyAddress) register(system *actor.ActorSystem, to replier) *actor.PID {
	var buf [32]byte
	id := string(strconv.AppendUint(append(buf[:0], "reply$"...), replyIDs.Add(1), 36))
	reg := system.ProcessRegistry
	a.system, a.to = system, to
	a.pid.Address, a.pid.Id = reg.Address, id
	reg.LocalPIDs.GetBucket(id).SetIfAbsent(id, a)
	return &a.pid
}

// SendUserMessage delivers the reply (a dead letter: the session was gone).
func (a *replyAddress) SendUserMessage(_ *actor.PID, message interface{}) {
	_, msg, _ := actor.UnwrapEnvelope(message)
	switch m := msg.(type) {
	case *actor.DeadLetterResponse:
		a.end(nil, errNoSession)
	case *messages.PromptAccepted:
		a.to.acceptedAt(m.GetGeneration())
	default:
		a.end(msg, nil)
	}
}

// SendSystemMessage is ignored: a reply address watches nothing.
func (a *replyAddress) SendSystemMessage(*actor.PID, interface{}) {}

// Stop unregisters the address without a reply.
func (a *replyAddress) Stop(*actor.PID) { a.end(nil, errNoSession) }

// end unregisters the address and hands its replier the reply, once.
func (a *replyAddress) end(res interface{}, err error) {
	if !a.ended.CompareAndSwap(false, true) {
		return
	}
	a.system.ProcessRegistry.Remove(&a.pid)
	a.to.replied(res, err)
}
