package actors

import (
	"context"
	"fmt"
	"net/http"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/session"
)

// execute carries out one effect of the session's core. Effects that an
// actor-less deployment answers at once (no credentials, no fallback chain,
// no budget, no provider) queue their answer as the next input.
func (s *SessionActor) execute(ctx actor.Context, e *session.Effect) {
	switch e.Kind {
	case session.Emit:
		s.emit(e.Event)
	case session.AppendModelChange:
		s.appendModelChange(e.Change)
	case session.StripTrailingError:
		s.stripTrailingError()
	case session.ReplaceContext:
		s.runtime = e.Context
	case session.SelectCredential:
		s.selectCredential(ctx, e)
	case session.SettleReservation:
		s.settleReservation(ctx, e)
	case session.ObserveRateLimits:
		s.tellCredentials(ctx, e.Model, &messages.PacingObserve{SessionId: s.cfg.ID, Credential: e.Credential,
			Limits: e.Limits, ArrivedUnixMs: e.At.UnixMilli()})
	case session.CancelReservation:
		s.tellCredentials(ctx, e.Model, &messages.PacingCancel{SessionId: s.cfg.ID, Token: e.Token})
	case session.StartTurn:
		s.startTurn(ctx, e.Turn, e.Model, e.Credential)
	case session.CancelTurn:
		s.cancelTurn()
	case session.RunTools:
		s.runTools(ctx, e.Turn, e.Calls)
	case session.DeliverSteering:
		s.deliverSteering()
	case session.Compact:
		s.compactFor(ctx, e)
	case session.ArmTimer:
		s.armTimer(ctx, e)
	case session.CancelTimer:
		s.deps.Timers.Cancel(s.cfg.ID, e.Token)
	case session.ResetProviderSession:
		s.resetProviderSession(e.Model)
	case session.AskCredentialSwitch, session.AskFallback, session.AskBudget:
		s.ask(ctx, e)
	case session.ReportOutcome, session.DropBudgetHold, session.ReleaseSession:
		s.tellShared(ctx, e)
	case session.Settle:
		s.settle(ctx, e.Result)
	case session.RejectPrompt, session.ReplyAttach:
		ctx.Respond(promptResult(e.Result))
	default:
		s.executeLifecycle(ctx, e)
	}
}

// cancelTurn stops the running turn, if any.
func (s *SessionActor) cancelTurn() {
	if s.running != nil {
		s.running.cancel(context.Canceled)
		s.running = nil
	}
}

// resetProviderSession drops what model's provider keeps for the session
// (a stored previous_response_id): a stale replay starts afresh.
func (s *SessionActor) resetProviderSession(model string) {
	if p := s.deps.Providers[providerOf(model)]; p != nil {
		p.ResetSession(s.cfg.ID)
	}
}

// appendModelChange writes a change of model to the history (with the
// step's record on a durable chain) and publishes the new model; a write
// that fails keeps the model as it was.
func (s *SessionActor) appendModelChange(change *session.ModelChange) {
	entry := &messages.Entry{Entry: &messages.Entry_ModelChange{ModelChange: modelChange(change)}}
	if d := s.dur; d != nil && d.records != nil { // written with the step's record (commitStep)
		s.batchModelChange(d, entry)
		return
	}
	write := s.append
	if change.Reason == "user" {
		write = s.appendSynced
	}
	if err := write(false, entry); err != nil {
		s.historyFailed(err, true) // the model stays as it was
		return
	}
	to := change.To
	s.cfg.State.model.Store(&to)
}

// stripTrailingError removes the failed assistant message at the end of
// the runtime context (it stays in the history).
func (s *SessionActor) stripTrailingError() {
	if n := len(s.runtime); n > 0 {
		if m := s.runtime[n-1].GetAssistant(); m != nil && isFailure(m) {
			s.runtime[n-1] = nil
			s.runtime = s.runtime[:n-1]
		}
	}
}

// selectCredential asks the provider's credentials actor for a key; a
// paced turn reserves its need with it: its estimated input and its
// output bound (max_tokens; without one, the actor estimates the output
// from the model's answers), at the session's priority.
func (s *SessionActor) selectCredential(ctx actor.Context, e *session.Effect) {
	m := &messages.SelectCredential{SessionId: s.cfg.ID}
	if e.Pace {
		prov := providerOf(e.Model)
		m.Pace, m.Token, m.Priority, m.Credential, m.ReplyTo = true, e.Token, int32(s.cfg.Priority), s.core.Credential(), Ref(ctx.Self())
		m.InputTokens, m.Model = pacing.EstimateInput(s.runtime, s.deps.toolSpecs()), e.Model
		m.OutputTokens, m.OutputBounded = pacing.OutputBound(s.deps.Providers[prov])
	}
	track.Request(ctx, s.deps.Clock, s.deps.Credentials[providerOf(e.Model)], m)
}

// settleReservation tells the credentials actor what a paced turn used
// and the limits its response announced: nothing to tell when it reserved
// nothing and its response announced none.
func (s *SessionActor) settleReservation(ctx actor.Context, e *session.Effect) {
	last := e.Message
	if e.Token == 0 && e.Limits == nil {
		return
	}
	u := last.GetUsage()
	settle := &messages.PacingSettle{SessionId: s.cfg.ID, Token: e.Token, Credential: e.Credential,
		Sent: last.GetHttpStatus() != 0 || !isFailure(last), Refused: last.GetHttpStatus() == http.StatusTooManyRequests,
		InputTokens: u.GetInput(), OutputTokens: u.GetOutput(), CachedInputTokens: u.GetCacheRead() + u.GetCacheWrite(),
		Limits: e.Limits}
	if settle.Refused {
		if h, ok := retry.ParseHint(last.GetHeaders(), last.GetErrorMessage(), s.deps.Clock.Now()); ok {
			settle.RetryAfterMs = h.Delay.Milliseconds()
		}
	}
	s.tellCredentials(ctx, e.Model, settle)
}

// tellCredentials sends msg to model's provider's credentials actor.
func (s *SessionActor) tellCredentials(ctx actor.Context, model string, msg track.Message) {
	if pid := s.deps.Credentials[providerOf(model)]; pid != nil {
		track.Send(ctx, s.deps.Clock, pid, msg)
	}
}

// keyFree reports whether the key the session holds is free in the
// node's view of its provider's credentials, and unpaced (no rate limit
// known): a retry then keeps it without asking (the credentials actor
// would answer the same sticky key, with nothing to reserve).
func (s *SessionActor) keyFree() bool {
	cred := s.core.Credential()
	view := s.deps.Views[providerOf(s.core.Model())]
	return cred != "" && view.Free(cred, s.deps.Clock.Now()) && !view.Paced()
}

// compactFor compacts the context after an overflow, unless automatic
// compaction is off: then the overflow ends the prompt. A compaction asked
// for between prompts runs whatever the setting.
func (s *SessionActor) compactFor(ctx actor.Context, e *session.Effect) {
	if e.Message == nil { // asked for between prompts: its caller waits
		s.compactCaller = ctx.Sender()
		s.compact(ctx, e.Generation, nil)
		return
	}
	if !s.cfg.State.AutoCompaction() {
		s.pending = append(s.pending, session.Input{Kind: session.InCompactionDone, Generation: e.Generation,
			Err: e.Message.GetErrorMessage()})
		return
	}
	s.compact(ctx, e.Generation, e.Message)
}

// armTimer arms the backoff and the retry's continue after it with the
// runtime's timer service, the one owner of every backoff: its end
// (TaskDue) comes to the actor, or, for a backoff the session waits out
// without its actors (Passivate), by the session's id, which starts the
// session again.
func (s *SessionActor) armTimer(ctx actor.Context, e *session.Effect) {
	if s.dur != nil {
		s.dur.armed = true
	}
	to := ctx.Self()
	if e.Passivate {
		to = nil
	}
	s.deps.Timers.Arm(s.cfg.ID, to, e.Delay+e.ContinueDelay, e.Generation, e.Token)
	if e.Passivate && s.deps.Passivation.Hold(s.cfg.ID) {
		track.Send(ctx, s.deps.Clock, ctx.Self(), &messages.Passivate{Token: e.Token})
	}
}

// ask sends the core's question to the shared actor that answers it: the
// credentials actor (a key's usage limit), the fallback actor (the next
// model) or the retry budget (when to go). The core asks only the actors
// there are (session.Config's Credentialed, FallbackRoles, Budgeted).
func (s *SessionActor) ask(ctx actor.Context, e *session.Effect) {
	clk := s.deps.Clock
	switch e.Kind {
	case session.AskCredentialSwitch:
		track.Request(ctx, clk, s.deps.Credentials[providerOf(e.Model)], &messages.MarkUsageLimitReached{
			SessionId: s.cfg.ID, BlockForMs: e.BlockFor.Milliseconds(), Token: e.Token, Credential: s.core.Credential()})
	case session.AskFallback:
		track.Request(ctx, clk, s.deps.Fallbacks[e.Role], &messages.NextModelRequest{
			SessionId: s.cfg.ID, Role: e.Role, Current: e.Model, Primary: e.Primary,
			CooldownMs: e.BlockFor.Milliseconds(), Pin: e.Pin, Token: e.Token})
	case session.AskBudget:
		req := &messages.RetryBudgetRequest{SessionId: s.cfg.ID, Token: e.Token, DueUnixNano: e.Due.UnixNano(), ReplyTo: Ref(ctx.Self())}
		if !e.Latest.IsZero() {
			req.LatestUnixNano = e.Latest.UnixNano()
		}
		track.Request(ctx, clk, s.deps.Budgets[providerOf(e.Model)], req)
	}
}

// tellShared tells the provider's shared actors what they keep: the
// outcome of a budgeted attempt, a dropped budget hold, or that the
// session is done with them (and with its timer).
func (s *SessionActor) tellShared(ctx actor.Context, e *session.Effect) {
	clk := s.deps.Clock
	creds, budget := s.deps.Credentials[providerOf(e.Model)], s.deps.Budgets[providerOf(e.Model)]
	switch {
	case budget == nil && e.Kind != session.ReleaseSession:
	case e.Kind == session.ReportOutcome:
		track.Send(ctx, clk, budget, &messages.RetryBudgetOutcome{Success: e.Success})
	case e.Kind == session.DropBudgetHold:
		track.Send(ctx, clk, budget, &messages.RetryBudgetDrop{SessionId: s.cfg.ID})
	case e.Kind == session.ReleaseSession:
		if creds != nil {
			track.Send(ctx, clk, creds, &messages.ReleaseSession{SessionId: s.cfg.ID})
		}
		if budget != nil && budget != creds {
			track.Send(ctx, clk, budget, &messages.ReleaseSession{SessionId: s.cfg.ID})
		}
		s.deps.Timers.Cancel(s.cfg.ID, 0)
	}
}

// settle answers the prompt's waiter with its result, if any.
func (s *SessionActor) settle(ctx actor.Context, r *session.Result) {
	if s.waiter == nil { // an attach gets it from the core
		return
	}
	res := promptResult(r)
	if he := s.historyErr; he != nil && r.ErrorKind == session.KindHistory {
		res.History = &messages.HistoryFailure{Op: he.Op, Path: he.Path, Cause: he.Err.Error()}
	}
	ctx.Send(s.waiter, res)
	s.waiter, s.attached = nil, false
}

func promptResult(r *session.Result) *messages.PromptResult {
	res := &messages.PromptResult{Generation: r.Generation, Message: r.Message, ErrorKind: string(r.ErrorKind), Error: r.Error}
	if end := r.Retry; end != nil {
		res.Retry = &messages.RetryFailure{Class: end.Class.String(), Attempt: int32(end.Attempt),
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

// emitWire publishes one event built by the actor itself (tool
// executions, steering) to the subscribers; set fills in its payload.
func (s *SessionActor) emitWire(set func(*messages.SessionEvent)) {
	s.eventSeq++
	if !s.listened() {
		return
	}
	ev := &messages.SessionEvent{SessionId: s.cfg.ID, Seq: s.eventSeq, TimeMs: s.deps.Clock.Now().UnixMilli()}
	set(ev)
	s.publish(ev)
}

// listened reports whether anyone subscribes to the session's events, on
// the session or runtime-wide.
func (s *SessionActor) listened() bool {
	return s.cfg.Events.HasSubscribers() || s.cfg.AllEvents.HasSubscribers()
}

// publish gives ev to the session's subscribers and the runtime-wide ones.
func (s *SessionActor) publish(ev *messages.SessionEvent) {
	s.cfg.Events.Publish(ev)
	if s.cfg.AllEvents != nil {
		s.cfg.AllEvents.Publish(ev)
	}
}

// emit publishes one event of the core to the subscribers, in the wire
// format; with none (as the step found), nothing is built (the event's seq
// is still spent). A prompt's agent_start carries the prompt, which the
// actor keeps.
func (s *SessionActor) emit(ev *session.Event) {
	s.eventSeq++
	if !s.listening {
		return
	}
	out := &messages.SessionEvent{SessionId: s.cfg.ID, Seq: s.eventSeq, TimeMs: s.deps.Clock.Now().UnixMilli()}
	if !ev.Wire(out) {
		panic(fmt.Sprintf("actors: emit of unknown event %v", ev.Kind))
	}
	if ev.Kind == session.EventAgentStart && ev.PromptStart {
		out.GetAgentStart().User = s.promptUser
	}
	s.publish(out)
}
