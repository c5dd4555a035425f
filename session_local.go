package musepi

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/internal/hosting"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages/protocol"
)

// localActor runs a session as an actor of its runtime: started by the
// session's first message, stopped when it passivates, and started again
// by the next message.
type localActor struct {
	s         *Session
	pid       atomic.Pointer[actor.PID] // the session's actor, while it runs
	start     sync.Mutex                // guards the fields below, and every delivery to the actor
	prepared  *actors.PreparedSession   // what starts it (again, after it passivated)
	runs      int                       // actors started, for their names
	buffering bool                      // the actor passivates: deliveries are buffered
	buffered  []func(*actor.PID)        // the deliveries buffered, in order
	closed    bool
}

// Prompt sends req with p's reply address as the sender.
func (l *localActor) Prompt(req *protocol.PromptRequest, p hosting.Prompt) {
	rt := l.s.rt
	reply := p.Register(rt.system, p)
	err := l.Deliver(func(pid *actor.PID) {
		track.RequestFrom(rt.system.Root, rt.cfg.clock, pid, req, reply)
	})
	if err != nil { // closed meanwhile, or the actor could not start
		rt.system.Root.Stop(reply)
	}
}

// Deliver runs send with the session's actor, starting it if it is not
// running (the first message, or one after the session passivated);
// while the actor passivates, send is buffered and runs once that ends. It
// fails once the session is closed.
func (l *localActor) Deliver(send func(*actor.PID)) error {
	l.start.Lock()
	defer l.start.Unlock()
	if l.closed {
		return l.s.closedError()
	}
	if l.buffering {
		l.buffered = append(l.buffered, send)
		return nil
	}
	pid, err := l.actorLocked()
	if err != nil {
		return err
	}
	send(pid)
	return nil
}

// actorLocked returns the session's actor, starting it if it is not
// running; l.start is locked.
func (l *localActor) actorLocked() (*actor.PID, error) {
	if pid := l.pid.Load(); pid != nil {
		return pid, nil
	}
	l.runs++
	name := "session-" + l.s.id + "#" + strconv.Itoa(l.runs)
	pid, err := actors.StartSession(l.s.rt.system.Root, l.s.rt.deps, name, l.prepared)
	if err != nil {
		return nil, fmt.Errorf("musepi: start session %s: %w", l.s.id, err)
	}
	l.pid.Store(pid)
	return pid, nil
}

// A local actor's requests need no bookkeeping, and a dead letter means
// the session is gone: nothing is asked again.
func (l *localActor) Asked(_, _ *actor.PID)       {}
func (l *localActor) Answered(*actor.PID)         {}
func (l *localActor) Again(*actor.PID) bool       { return false }
func (l *localActor) Watch()                      {}
func (l *localActor) State() *actors.SessionState { return l.s.state }

// IsClosed reports whether the session was closed.
func (l *localActor) IsClosed() bool {
	l.start.Lock()
	defer l.start.Unlock()
	return l.closed
}

// buffer starts buffering the messages sent to the session (its actor
// passivates); false when it is closed or buffering already.
func (l *localActor) buffer() bool {
	l.start.Lock()
	defer l.start.Unlock()
	if l.closed || l.buffering {
		return false
	}
	l.buffering = true
	return true
}

// passivated takes the state of an actor that passivates: with nothing
// buffered meanwhile, the session has no actor until its next message
// (true); otherwise the buffered messages go to the actor, which stays
// (false).
func (l *localActor) passivated() bool {
	l.start.Lock()
	defer l.start.Unlock()
	if !l.buffering {
		return false
	}
	if len(l.buffered) > 0 || l.closed {
		l.flushLocked()
		return false
	}
	l.buffering = false
	l.pid.Store(nil)
	return true
}

// flush delivers the buffered messages: the actor stays.
func (l *localActor) flush() {
	l.start.Lock()
	defer l.start.Unlock()
	l.flushLocked()
}

// flushLocked stops buffering and delivers what was buffered to the
// running actor, in order; l.start is locked.
func (l *localActor) flushLocked() {
	buffered := l.buffered
	l.buffering, l.buffered = false, nil
	pid := l.pid.Load()
	for _, send := range buffered {
		send(pid)
	}
}

// Close stops the session's actor (a waiting Prompt returns ErrShutdown)
// and waits until it has stopped; a session never started only closes its
// history.
func (l *localActor) Close(ctx context.Context) error {
	s := l.s
	defer s.rt.forget(s.id)
	l.start.Lock()
	if l.closed {
		l.start.Unlock()
		return nil
	}
	if l.buffering {
		l.flushLocked() // the actor stays, and stops now
	}
	pid := l.pid.Load()
	if pid == nil && l.prepared.Passivated() {
		// It passivated with a prompt waiting: its actor settles it.
		var err error
		if pid, err = l.actorLocked(); err != nil {
			l.start.Unlock()
			return err
		}
	}
	l.closed = true
	prepared := l.prepared
	l.start.Unlock()
	if pid == nil { // never started: only its history to close
		if err := prepared.Drop(); err != nil {
			return fmt.Errorf("musepi: close session %s: %w", s.id, err)
		}
		return nil
	}
	return waitFuture(ctx, s.rt.system.Root.StopFuture(pid))
}

// CloseHere closes the session here and stops its actor, which ends its
// chain unless it is leaving (handed over, or its history taken by
// another activation); it waits until the actor has stopped.
func (l *localActor) CloseHere(ctx context.Context) error {
	l.start.Lock()
	l.closed = true
	pid := l.pid.Load()
	l.start.Unlock()
	l.s.rt.forget(l.s.id)
	if pid != nil {
		return waitFuture(ctx, l.s.rt.system.Root.StopFuture(pid))
	}
	return nil
}
