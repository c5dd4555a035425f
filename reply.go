package musepi

import (
	"errors"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/messages"
)

// errNoSession is the error of a reply address whose message went to a
// session that no longer exists.
var errNoSession = errors.New("session is gone")

// replyAddress is a one-shot reply address: a process in the actor
// system's registry whose first message calls fn and unregisters it. It is
// a future without a waiting goroutine.
type replyAddress struct {
	system *actor.ActorSystem
	once   sync.Once
	fn     func(res interface{}, err error)
	// accepted, if set, is called with a PromptAccepted's generation,
	// which does not end the address.
	accepted func(generation uint64)
}

// newReplyAddress registers a reply address calling fn (and accepted for a
// PromptAccepted, if not nil) and returns its PID.
func newReplyAddress(system *actor.ActorSystem, fn func(res interface{}, err error), accepted func(generation uint64)) *actor.PID {
	p := &replyAddress{system: system, fn: fn, accepted: accepted}
	pid, _ := system.ProcessRegistry.Add(p, "reply"+system.ProcessRegistry.NextId())
	return pid
}

// SendUserMessage delivers the reply (a dead letter: the session was gone).
func (p *replyAddress) SendUserMessage(pid *actor.PID, message interface{}) {
	_, msg, _ := actor.UnwrapEnvelope(message)
	switch m := msg.(type) {
	case *actor.DeadLetterResponse:
		p.finish(pid, nil, errNoSession)
		return
	case *messages.PromptAccepted:
		if p.accepted != nil {
			p.accepted(m.GetGeneration())
		}
		return
	}
	p.finish(pid, msg, nil)
}

// SendSystemMessage is ignored: a reply address watches nothing.
func (p *replyAddress) SendSystemMessage(*actor.PID, interface{}) {}

// Stop unregisters the address without a reply.
func (p *replyAddress) Stop(pid *actor.PID) { p.finish(pid, nil, errNoSession) }

func (p *replyAddress) finish(pid *actor.PID, res interface{}, err error) {
	p.once.Do(func() {
		p.system.ProcessRegistry.Remove(pid)
		p.fn(res, err)
	})
}
