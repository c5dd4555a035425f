package cluster

import (
	"time"

	"github.com/musepi/musepi/messages"
)

// A handle tells its subscribers when the node hosting its session is
// lost with a prompt of theirs waiting on it, and when the session is
// reached again, with two events of its own (not the session's: their seq
// is 0, as for the agent_settled a handle makes, see settledEvent):
//
//   - host_lost {member}: audit found the member at the prompt's
//     activation still gone one audit after it went, and the membership
//     does not say it left gracefully (a node that leaves gracefully hands
//     its sessions over: no loss). Once per loss: the other prompts
//     waiting on the same host say nothing more.
//   - resumed {member}: after a host_lost, an open reached the session's
//     new activation (the node that took the session over, which resumed
//     its retry chain from its record), or audit found the lost member
//     listed again. An open tells it before the first event the new
//     activation relays, which may come before its answer (the events it
//     kept of the resumed prompt).
//
// Without a prompt waiting, a handle says nothing of its session's host:
// its next message finds the new one.

// hostLostEvent is the host_lost of the member at addr, for session.
func hostLostEvent(session, addr string) *messages.SessionEvent {
	return &messages.SessionEvent{SessionId: session, TimeMs: time.Now().UnixMilli(),
		Event: &messages.SessionEvent_HostLost{HostLost: &messages.HostLost{Member: addr}}}
}

// resumedEvent is the resumed of session, hosted at addr now.
func resumedEvent(session, addr string) *messages.SessionEvent {
	return &messages.SessionEvent{SessionId: session, TimeMs: time.Now().UnixMilli(),
		Event: &messages.SessionEvent_Resumed{Resumed: &messages.Resumed{Member: addr}}}
}

// reachedLocked: an open reached the session's activation. After a
// host_lost, the subscribers are told resumed, unless the relay told them
// on the activation's first event; r.mu is held.
func (r *remoteSession) reachedLocked() {
	if r.lost == "" {
		return
	}
	r.lost = ""
	r.tellResumed()
}

// tellResumed tells the subscribers resumed, once per open after a
// host_lost (r.resume): the first of the relay (an event of the
// activation asked) and the open's answer tells it.
func (r *remoteSession) tellResumed() {
	if r.resume.Load() == nil {
		return
	}
	if addr := r.resume.Swap(nil); addr != nil {
		r.publish(resumedEvent(r.s.ID(), *addr))
	}
}
