package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/session"
)

// execute carries out one effect of the session's core. Effects that an
// actor-less deployment answers at once (no credentials, no fallback chain,
// no budget, no provider) queue their answer as the next input.
func (s *SessionActor) execute(ctx actor.Context, e *session.Effect) {
	peers := sharedActors{s.deps, s.cfg}
	switch e.Kind {
	case session.Emit:
		s.events.emit(e.Event)
	case session.AppendModelChange:
		s.hist.appendModelChange(e.Change)
	case session.StripTrailingError:
		s.hist.stripTrailingError()
	case session.ReplaceContext:
		s.hist.context = e.Context
	case session.SelectCredential:
		peers.selectCredential(ctx, e, s.core.Credential(), s.hist.context)
	case session.SettleReservation:
		peers.settleReservation(ctx, e, s.work.firstToken)
	case session.ObserveRateLimits:
		peers.tellCredentials(ctx, e.Model, &protocol.PacingObserve{SessionId: s.cfg.ID, Credential: e.Credential,
			Limits: e.Limits, ArrivedUnixMs: e.At.UnixMilli()})
	case session.CancelReservation:
		peers.tellCredentials(ctx, e.Model, &protocol.PacingCancel{SessionId: s.cfg.ID, Token: e.Token})
	case session.StartTurn:
		s.work.start(ctx, &s.pending, s.hist.context, e.Turn, e.Model, e.Credential)
	case session.CancelTurn:
		s.work.cancel()
	case session.RunTools:
		s.work.runTools(ctx, &s.pending, &s.events, e.Turn, e.Calls)
	case session.DeliverSteering:
		s.hist.deliverSteering(&s.events)
	case session.ArmTimer:
		s.armTimer(ctx, e)
	case session.CancelTimer:
		s.deps.Timers.Cancel(s.cfg.ID, e.Token)
	case session.ResetProviderSession:
		s.work.resetProviderSession(e.Model)
	case session.AskCredentialSwitch, session.AskFallback, session.AskBudget:
		peers.ask(ctx, e, s.core.Credential())
	case session.ReportOutcome, session.DropBudgetHold, session.ReleaseSession:
		peers.tell(ctx, e)
	case session.Settle:
		s.callers.settle(ctx, e.Result, s.hist.promptErr)
	default:
		s.executeLifecycle(ctx, e)
	}
}

// armTimer arms the backoff and the retry's continue after it with the
// runtime's timer service, the one owner of every backoff: its end
// (timers.Due) comes to the actor, or, for a backoff the session waits out
// without its actors (Passivate), by the session's id, which starts the
// session again.
func (s *SessionActor) armTimer(ctx actor.Context, e *session.Effect) {
	if s.hist.dur != nil {
		s.hist.dur.armed = true
	}
	to := ctx.Self()
	if e.Passivate {
		to = nil
	}
	s.deps.Timers.Arm(s.cfg.ID, to, e.Delay+e.ContinueDelay, e.Generation, e.Token)
	if e.Passivate && s.deps.Passivation.Buffer(s.cfg.ID) {
		track.Send(ctx, s.deps.Clock, ctx.Self(), &passivate{ticket: e.Token})
	}
}

func promptResult(r *session.Result) *protocol.PromptResult {
	res := &protocol.PromptResult{Generation: r.Generation, Message: r.Message, ErrorKind: string(r.ErrorKind), Error: r.Error}
	if end := r.Retry; end != nil {
		res.Retry = &protocol.RetryFailure{Class: end.Class.String(), Attempt: int32(end.Attempt),
			HttpStatus: r.Message.GetHttpStatus(), FinalError: end.FinalError}
	}
	return res
}

func modelChange(c *session.ModelChange) *messages.ModelChange {
	m := &messages.ModelChange{From: c.From, To: c.To, Role: c.Role, Reason: c.Reason, Pinned: c.Pinned}
	if !c.PrimaryUntil.IsZero() {
		m.PrimaryCooldownUntilMs = c.PrimaryUntil.UnixMilli()
	}
	return m
}
