package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/session"
)

// executeLifecycle carries out the effects of what a session does
// between and around its prompts: it compacts, answers the callers (of a
// compaction asked for, an attach, a hand-over), and leaves its actors.
func (s *SessionActor) executeLifecycle(ctx actor.Context, e *session.Effect) {
	switch e.Kind {
	case session.Compact:
		if e.Message == nil { // asked for between prompts: its caller waits
			s.callers.compaction = ctx.Sender()
		}
		s.publishState() // compacting, before the hook runs
		s.work.compact(ctx, &s.pending, s.hist.context, e, s.cfg.State.AutoCompaction())
	case session.HandOver:
		s.handOver(ctx, e.Result)
	case session.Leave:
		s.leave(ctx, e.Result)
	case session.Passivate:
		s.passivate(ctx)
	case session.CancelPassivation:
		s.deps.Passivation.Flush(s.cfg.ID)
	case session.ReplyCompaction:
		s.publishState() // its caller reads the session no longer compacting
		fallthrough
	default:
		s.callers.answer(ctx, e, s.hist.context)
	}
}

// handOver hands the session over at rest: its record is written again
// (in a backoff, with the history's current seq), the actor leaves, and
// the hand-over's caller is told. A record that cannot be written keeps
// the session here (InHandOverFailed).
func (s *SessionActor) handOver(ctx actor.Context, res *session.Result) {
	if s.core.State() == session.Backoff {
		if err := s.hist.writeRecord(&s.core); err != nil {
			s.pending = append(s.pending, session.Input{Kind: session.InHandOverFailed, Err: err.Error()})
			return
		}
	}
	s.leave(ctx, res)
	tell(ctx, s.callers.handOver, &protocol.Ack{})
	s.callers.handOver = nil
}

// leave stops the actor without ending the session's chain, which goes on
// at its next activation: the session was handed over (its record
// written) or another activation took it (its hold found
// history.ErrTaken: this node was paused or cut off past its lease, and
// acts no more). A waiting prompt is answered with res ("handed over"),
// so that its handle attaches to the next activation.
func (s *SessionActor) leave(ctx actor.Context, res *session.Result) {
	s.callers.handedOver(ctx, res)
	ctx.Stop(ctx.Self())
}

// passivate gives the session's state to its root for its next actor and
// stops (see Passivation); if messages were held meanwhile the root
// delivers them instead, and the session stays (InWake).
func (s *SessionActor) passivate(ctx actor.Context) {
	kept := s.asleep // the next actor's, untouched by this one as it stops
	s.entry.passivated = &kept
	if !s.deps.Passivation.Passivated(s.cfg.ID) {
		s.entry.passivated = nil
		s.pending = append(s.pending, session.Input{Kind: session.InWake})
		return
	}
	ctx.Stop(ctx.Self())
}
