package actors

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// RetryActor is the child of a session that owns its retry chain: the
// attempt counter, the lifecycle, the backoff timer and its abort. It feeds
// inputs to retry.Chain and executes the effects; the policy itself is
// decided there, never here. Everything the session must do comes back to
// it as one RetryDecision per input.
//
// Its state lives in a retryState that outlives the actor instance: when a
// panic restarts the actor (protoactor's supervision), the new instance
// rolls the chain back to its state before the failed input and runs that
// input again, so attempt, lifecycle and generation stay intact.
type RetryActor struct {
	*retryState
}

// retryState is everything a RetryActor keeps across restarts.
type retryState struct {
	deps      *Deps
	sessionID string
	chain     *retry.Chain
	timer     clock.Timer

	// The turn being decided, until no reply is awaited any more.
	deciding bool
	current  string // "provider/model" the turn ran on
	primary  string
	role     string

	// The last settings decoded, and the message they came from: a session
	// sends the same message until its settings change.
	settingsFrom *messages.RetrySettings
	settings     retry.Settings

	askPin   bool                     // the pending model-fallback ask pins
	fallback *messages.NextModelReply // the reply being stepped
	actions  []*messages.RetryAction

	// For restarts: the input being stepped and the chain before it, set
	// only while a step runs.
	stepping    *stepSnapshot
	incarnation int
}

// stepSnapshot is what a restart needs to replay a step that panicked.
type stepSnapshot struct {
	input  retry.Input
	before retry.Chain
}

// snapshots lend the retry actors a snapshot for one step, so an idle
// session keeps none.
var snapshots = sync.Pool{New: func() any { return new(stepSnapshot) }}

func newRetryState(deps *Deps, sessionID string, src retry.Source) *retryState {
	return &retryState{deps: deps, sessionID: sessionID, chain: retry.NewChain(src)}
}

// Receive handles RetryTurnEnded, RetryCancel, SleepDone and the replies of
// the credential and model-fallback actors.
func (a *RetryActor) Receive(ctx actor.Context) {
	now := a.deps.Clock.Now()
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.incarnation++
		if snap := a.stepping; a.incarnation > 1 && snap != nil {
			a.deps.Log.Error().Str("session", a.sessionID).Int("restart", a.incarnation-1).
				Msg("retry actor restarted after a panic; replaying the failed input")
			*a.chain = snap.before
			a.actions = nil
			a.stepping = nil
			a.step(ctx, snap.input)
		}
	case *messages.RetryTurnEnded:
		settings := a.decodeSettings(m.GetSettings())
		a.deciding = true
		a.current, a.primary, a.role = m.GetCurrentModel(), m.GetPrimaryModel(), m.GetRole()
		ab := m.GetAborts()
		aborts := retry.AbortState{User: ab.GetUser(), Dispose: ab.GetDispose(), EditGuard: ab.GetEditGuard()}
		a.step(ctx, retry.TurnEnded(now, settings, m.GetMessage(), aborts, m.GetGeneration()))
	case *messages.UsageLimitReply:
		in := retry.Input{Kind: retry.InputCredentialReply, Now: now, Token: m.GetToken(), Switched: m.GetSwitched()}
		if m.GetRetryAtMs() > 0 {
			in.RetryAt = time.UnixMilli(m.GetRetryAtMs())
		}
		if m.GetSwitched() && a.chain.Phase() == retry.AwaitingCredential {
			a.actions = append(a.actions, &messages.RetryAction{
				Kind: messages.RetryAction_KIND_SWITCH_CREDENTIAL, Credential: m.GetCredential(), Redeemed: m.GetRedeemed()})
		}
		a.step(ctx, in)
	case *messages.NextModelReply:
		a.fallback = m
		a.step(ctx, retry.Input{Kind: retry.InputFallbackReply, Now: now, Token: m.GetToken(),
			Switched: m.GetSwitched(), From: m.GetFrom(), To: m.GetTo(), Role: m.GetRole()})
		a.fallback = nil
	case *messages.RetryBudgetGrant:
		a.step(ctx, retry.Input{Kind: retry.InputBudgetGrant, Now: now, Token: m.GetToken(), At: time.Unix(0, m.GetAtUnixNano())})
	case *messages.RetryBudgetRelease:
		a.step(ctx, retry.Input{Kind: retry.InputBudgetRelease, Now: now, Token: m.GetToken(), At: time.Unix(0, m.GetAtUnixNano())})
	case *messages.SleepDone:
		a.step(ctx, retry.Input{Kind: retry.InputSleepDone, Now: now, Token: m.GetToken()})
	case *messages.RetryCancel:
		kind := retry.InputAbortRetry
		if m.GetGlobal() {
			kind = retry.InputAbort
		}
		a.step(ctx, retry.Input{Kind: kind, Now: now})
	case *actor.Stopping:
		if a.timer != nil {
			a.timer.Stop()
		}
	}
}

// decodeSettings decodes a turn's settings, reusing the last decoding
// when the session sent the same message again.
func (a *RetryActor) decodeSettings(p *messages.RetrySettings) retry.Settings {
	if p != nil && p == a.settingsFrom {
		return a.settings
	}
	settings, err := retry.SettingsFromProto(p)
	if err != nil {
		a.deps.Log.Error().Err(err).Str("session", a.sessionID).Msg("invalid retry settings; using defaults")
		settings = retry.DefaultSettings()
	}
	a.settingsFrom, a.settings = p, settings
	return settings
}

// effectBuffers lend the retry actors a buffer for one step's effects, so
// an idle session keeps none.
var effectBuffers = sync.Pool{New: func() any { return new([]retry.Effect) }}

// step runs one input through the chain, executes its effects and sends
// the session what it must do.
func (a *RetryActor) step(ctx actor.Context, in retry.Input) {
	snap := snapshots.Get().(*stepSnapshot)
	snap.input, snap.before = in, *a.chain
	a.stepping = snap
	buf := effectBuffers.Get().(*[]retry.Effect)
	*buf = a.chain.AppendStep((*buf)[:0], in)
	for _, e := range *buf {
		a.execute(ctx, e)
	}
	clear(*buf) // drop the strings and messages the effects point to
	effectBuffers.Put(buf)
	a.stepping = nil
	*snap = stepSnapshot{}
	snapshots.Put(snap)
	d := &messages.RetryDecision{Actions: a.actions}
	a.actions = nil
	if a.deciding {
		switch a.chain.Phase() {
		case retry.AwaitingCredential, retry.AwaitingFallback, retry.AwaitingBudget:
		default:
			a.deciding = false
			d.Settled = true
			d.WillRetry = a.chain.Phase() == retry.Sleeping
		}
	}
	if len(d.Actions) > 0 || d.Settled {
		track.Send(ctx, a.deps.Clock, ctx.Parent(), d)
	}
}

func (a *RetryActor) action(kind messages.RetryAction_Kind) *messages.RetryAction {
	act := &messages.RetryAction{Kind: kind}
	a.actions = append(a.actions, act)
	return act
}

// execute carries out one effect of the chain.
func (a *RetryActor) execute(ctx actor.Context, e retry.Effect) {
	clk := a.deps.Clock
	switch e.Kind {
	case retry.OpenLifecycle:
		a.action(messages.RetryAction_KIND_LIFECYCLE_OPEN)
	case retry.CloseLifecycle:
		a.action(messages.RetryAction_KIND_LIFECYCLE_CLOSE)
	case retry.EmitStart:
		a.action(messages.RetryAction_KIND_EMIT_START).Start = &messages.AutoRetryStart{
			Attempt: int32(e.Start.Attempt), MaxAttempts: int32(e.Start.MaxAttempts),
			DelayMs: e.Start.Delay.Milliseconds(), ErrorMessage: e.Start.ErrorMessage, ErrorClass: e.Start.Class.String(),
			BudgetDelayMs: e.Start.BudgetDelay.Milliseconds(),
		}
	case retry.EmitEnd:
		end := &messages.AutoRetryEnd{Success: e.End.Success, Attempt: int32(e.End.Attempt)}
		if !e.End.Success {
			final := e.End.FinalError // a copy: &e.End would move every effect to the heap
			end.FinalError = &final
		}
		a.action(messages.RetryAction_KIND_EMIT_END).End = end
	case retry.EmitFallbackApplied:
		act := a.action(messages.RetryAction_KIND_FALLBACK_APPLIED)
		act.FallbackApplied = &messages.RetryFallbackApplied{From: e.Fallback.From, To: e.Fallback.To, Role: e.Fallback.Role}
		act.Pinned = a.askPin
		act.PrimaryCooldownUntilMs = a.fallback.GetPrimaryCooldownUntilMs()
	case retry.EmitFallbackSucceeded:
		a.action(messages.RetryAction_KIND_FALLBACK_SUCCEEDED).FallbackSucceeded =
			&messages.RetryFallbackSucceeded{Model: e.Fallback.To, Role: e.Fallback.Role}
	case retry.ResetProviderSession:
		a.action(messages.RetryAction_KIND_RESET_PROVIDER_SESSION)
	case retry.StripTrailingError:
		a.action(messages.RetryAction_KIND_STRIP_TRAILING_ERROR)
	case retry.RouteToCompaction:
		a.action(messages.RetryAction_KIND_ROUTE_TO_COMPACTION)
	case retry.AbortStream:
		a.action(messages.RetryAction_KIND_ABORT_STREAM)
	case retry.ScheduleContinue:
		act := a.action(messages.RetryAction_KIND_SCHEDULE_CONTINUE)
		act.DelayMs, act.Generation = e.Delay.Milliseconds(), e.Generation
	case retry.AskCredentialSwitch:
		pid := a.deps.Credentials[providerOf(a.current)]
		if pid == nil { // no credentials configured: nothing to switch to
			track.Send(ctx, clk, ctx.Self(), &messages.UsageLimitReply{Token: e.Token})
			return
		}
		track.Request(ctx, clk, pid, &messages.MarkUsageLimitReached{
			SessionId: a.sessionID, BlockForMs: e.BlockFor.Milliseconds(), Token: e.Token})
	case retry.AskModelFallback:
		a.askPin = e.Pin
		pid := a.deps.Fallbacks[a.role]
		if pid == nil { // no chain for this role
			track.Send(ctx, clk, ctx.Self(), &messages.NextModelReply{From: a.current, Role: a.role, Token: e.Token})
			return
		}
		track.Request(ctx, clk, pid, &messages.NextModelRequest{
			SessionId: a.sessionID, Role: a.role, Current: a.current, Primary: a.primary,
			CooldownMs: e.BlockFor.Milliseconds(), Pin: e.Pin, Token: e.Token})
	case retry.RecordOutcome:
		if pid := a.deps.Budgets[providerOf(a.current)]; pid != nil {
			track.Send(ctx, clk, pid, &messages.RetryBudgetOutcome{Success: e.Success})
		}
	case retry.DropBudgetHold:
		if pid := a.deps.Budgets[providerOf(a.current)]; pid != nil {
			track.Send(ctx, clk, pid, &messages.RetryBudgetDrop{SessionId: a.sessionID})
		}
	case retry.AskBudget:
		req := &messages.RetryBudgetRequest{SessionId: a.sessionID, Token: e.Token, DueUnixNano: e.Due.UnixNano()}
		if !e.Latest.IsZero() {
			req.LatestUnixNano = e.Latest.UnixNano()
		}
		pid := a.deps.Budgets[providerOf(a.current)]
		if pid == nil { // no budget for this provider: go at the backoff time
			track.Send(ctx, clk, ctx.Self(), &messages.RetryBudgetGrant{Token: e.Token, AtUnixNano: req.DueUnixNano})
			return
		}
		track.Request(ctx, clk, pid, req)
	case retry.Sleep:
		self, root, token := ctx.Self(), ctx.ActorSystem().Root, e.Token
		a.timer = clk.AfterFunc(e.Delay, func() {
			track.Send(root, clk, self, &messages.SleepDone{Token: token})
		})
	case retry.CancelSleep:
		if a.timer != nil {
			a.timer.Stop()
			a.timer = nil
		}
	}
}
