package actors

import (
	"net/http"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/session"
)

// sharedActors sends a session's asks and tells to the actors it shares
// with the runtime's other sessions: its provider's credentials actor and
// retry budget, its role's model-fallback actor, and the timer service. The
// core asks only the actors there are (session.Config's Credentialed,
// FallbackRoles, Budgeted).
type sharedActors struct {
	deps *Deps
	cfg  *SessionConfig
}

// selectCredential asks the provider's credentials actor for a key; a
// paced turn reserves its need with it: its estimated input and its
// output bound (max_tokens; without one, the actor estimates the output
// from the model's answers) on the context entries, at the session's
// priority; held is the key the session holds.
func (p sharedActors) selectCredential(ctx actor.Context, e *session.Effect, held string, entries []*messages.Entry) {
	m := &protocol.SelectCredential{SessionId: p.cfg.ID}
	if e.Pace {
		prov := providerOf(e.Model)
		m.Pace, m.Token, m.Priority, m.Credential, m.ReplyTo = true, e.Token, int32(p.cfg.Priority), held, Ref(ctx.Self())
		m.InputTokens, m.Model = pacing.EstimateInput(entries, p.deps.toolSpecs()), e.Model
		m.OutputTokens, m.OutputBounded = pacing.OutputBound(p.deps.Providers[prov])
		m.Fallbacks = p.fallbacksAtOnce(e)
	}
	track.Request(ctx, p.deps.Clock, p.deps.Credentials[providerOf(e.Model)], m)
}

// fallbacksAtOnce are the models of the turn's fallback chain
// (e.Fallbacks) that its provider's overload limiter may seat it on at
// once, its own model's limit full: those on the same provider, for a
// high-priority turn of a role that takes them (HighFallback).
func (p sharedActors) fallbacksAtOnce(e *session.Effect) []string {
	if len(e.Fallbacks) == 0 || p.cfg.Priority != pacing.High || !p.deps.HighFallback[p.cfg.Role] {
		return nil
	}
	var out []string
	for _, m := range e.Fallbacks {
		if m != e.Model && providerOf(m) == providerOf(e.Model) {
			out = append(out, m)
		}
	}
	return out
}

// settleReservation tells the credentials actor what a paced turn used
// and the limits its response announced, and with an overload limiter how
// its end went (overload.OutcomeOf, its time to first token firstToken):
// nothing to tell when it reserved nothing and its response announced
// none.
func (p sharedActors) settleReservation(ctx actor.Context, e *session.Effect, firstToken time.Duration) {
	last := e.Message
	if e.Token == 0 && e.Limits == nil {
		return
	}
	u := last.GetUsage()
	settle := &protocol.PacingSettle{SessionId: p.cfg.ID, Token: e.Token, Credential: e.Credential,
		Sent: last.GetHttpStatus() != 0 || !isFailure(last), Refused: last.GetHttpStatus() == http.StatusTooManyRequests,
		InputTokens: u.GetInput(), OutputTokens: u.GetOutput(), CachedInputTokens: u.GetCacheRead() + u.GetCacheWrite(),
		Limits: e.Limits}
	if p.deps.shared().limited[providerOf(e.Model)] {
		o := overload.OutcomeOf(last, firstToken)
		settle.Overload, settle.FirstTokenMs = int32(o.Result), o.FirstToken.Milliseconds()
	}
	if settle.Refused {
		if h, ok := retry.ParseHint(last.GetHeaders(), last.GetErrorMessage(), p.deps.Clock.Now()); ok {
			settle.RetryAfterMs = h.Delay.Milliseconds()
		}
	}
	p.tellCredentials(ctx, e.Model, settle)
}

// tellCredentials sends msg to model's provider's credentials actor.
func (p sharedActors) tellCredentials(ctx actor.Context, model string, msg track.Message) {
	if pid := p.deps.Credentials[providerOf(model)]; pid != nil {
		track.Send(ctx, p.deps.Clock, pid, msg)
	}
}

// keyFree reports whether cred, the key the session holds on model, is free in the
// node's view of its provider's credentials, and unpaced (no rate limit
// known): a retry then keeps it without asking (the credentials actor
// would answer the same sticky key, with nothing to reserve).
func (p sharedActors) keyFree(cred, model string) bool {
	view := p.deps.Views[providerOf(model)]
	return cred != "" && view.Free(cred, p.deps.Clock.Now()) && !view.Paced()
}

// ask sends the core's question to the shared actor that answers it: the
// credentials actor (a key's usage limit), the fallback actor (the next
// model) or the retry budget (when to go). The core asks only the actors
// there are (session.Config's Credentialed, FallbackRoles, Budgeted).
func (p sharedActors) ask(ctx actor.Context, e *session.Effect, held string) {
	clk := p.deps.Clock
	switch e.Kind {
	case session.AskCredentialSwitch:
		track.Request(ctx, clk, p.deps.Credentials[providerOf(e.Model)], &protocol.MarkUsageLimitReached{
			SessionId: p.cfg.ID, BlockForMs: e.Cooldown.Milliseconds(), Token: e.Token, Credential: held})
	case session.AskFallback:
		track.Request(ctx, clk, p.deps.Fallbacks[e.Role], &protocol.NextModelRequest{
			SessionId: p.cfg.ID, Role: e.Role, Current: e.Model, Primary: e.Primary,
			CooldownMs: e.Cooldown.Milliseconds(), Pin: e.Pin, Token: e.Token})
	case session.AskBudget:
		req := &protocol.RetryBudgetRequest{SessionId: p.cfg.ID, Token: e.Token, DueUnixNano: e.Due.UnixNano(), ReplyTo: Ref(ctx.Self())}
		if !e.Latest.IsZero() {
			req.LatestUnixNano = e.Latest.UnixNano()
		}
		track.Request(ctx, clk, p.deps.Budgets[providerOf(e.Model)], req)
	}
}

// tell tells the provider's shared actors what they keep: the
// outcome of a budgeted attempt, a dropped budget hold, or that the
// session is done with them (and with its timer).
func (p sharedActors) tell(ctx actor.Context, e *session.Effect) {
	clk := p.deps.Clock
	creds, budget := p.deps.Credentials[providerOf(e.Model)], p.deps.Budgets[providerOf(e.Model)]
	switch {
	case budget == nil && e.Kind != session.ReleaseSession:
	case e.Kind == session.ReportOutcome:
		track.Send(ctx, clk, budget, &protocol.RetryBudgetOutcome{Success: e.Success})
	case e.Kind == session.DropBudgetHold:
		track.Send(ctx, clk, budget, &protocol.RetryBudgetDrop{SessionId: p.cfg.ID})
	case e.Kind == session.ReleaseSession:
		if creds != nil {
			track.Send(ctx, clk, creds, &protocol.ReleaseSession{SessionId: p.cfg.ID})
		}
		if budget != nil && budget != creds {
			track.Send(ctx, clk, budget, &protocol.ReleaseSession{SessionId: p.cfg.ID})
		}
		p.deps.Timers.Cancel(p.cfg.ID, 0)
	}
}
