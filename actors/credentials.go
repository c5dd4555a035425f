package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/mailbox"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/retry"
)

// Credential is one API key of a provider.
type Credential struct {
	Name   string // unique within the provider
	APIKey string
	// BankedResets is how many usage-limit resets this credential may spend
	// (only with auto-redeem on).
	BankedResets int
	// Limits are the credential's configured rate limits, which pace its
	// calls until its responses announce theirs (none: the headers only).
	Limits pacing.Limits
}

// CredentialsPolicy is how a provider's credentials actor spends its keys.
type CredentialsPolicy struct {
	// AutoRedeem: a usage limit with no free sibling spends a banked reset.
	AutoRedeem bool
	// Budget, enabled (valid settings), makes the actor the provider's
	// retry budget.
	Budget retry.BudgetSettings
	// Pacing: turns reserve their need from the keys' rate-limit budgets
	// (configured limits and announced ones) before they go out.
	Pacing bool
	// Refunds: the provider gives back the output max_tokens reserved and
	// a call did not use (provider.OutputRefunder).
	Refunds bool
	// StickyWait is how long a turn waits for the key its session last
	// used before it moves (pacing.Options.StickyWait; 0: the default).
	StickyWait time.Duration
	// Provider is the provider's name, for the errors pacing gives.
	Provider string
	// Window is the shortest window the provider is known to enforce its
	// per-minute limits over (pacing.Options.Window; 0: unknown, each key
	// starts at a second's worth at once and learns).
	Window time.Duration
}

// credentialState is a credential and how long it is blocked.
type credentialState struct {
	Credential
	blockedUntil time.Time
}

// CredentialsActor holds the credentials of one provider: session-sticky
// selection, blocked-until times after usage limits, banked resets; and the
// provider's retry budget, when there is one.
type CredentialsActor struct {
	clk        clock.Clock
	creds      []credentialState
	sticky     map[string]int // session -> index into creds
	next       int            // round-robin start for new sessions
	autoRedeem bool

	budget  *retry.Budget         // nil: no budget
	holders map[string]*actor.PID // session -> its retry actor, for releases

	pacing   *pacingState // nil: pacing off
	provider string       // the provider's name

	view *CredentialsView // written after each change (nil: none)
}

// CredentialsProps spawns the credentials actor of one provider, which
// spends creds as policy says. view, if not nil, mirrors the blocked
// credentials, the budget's tokens and whether the keys are paced. opts
// are added to the props (a dispatcher, say).
func CredentialsProps(clk clock.Clock, creds []Credential, policy CredentialsPolicy, view *CredentialsView, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return NewCredentialsActor(clk, creds, policy, view)
	}, append([]actor.PropsOption{mailbox.Option(clk)}, opts...)...)
}

// NewCredentialsActor returns the credentials actor CredentialsProps
// spawns, for a caller that builds its own props (a cluster kind). Its keys
// start blocked until what view holds (a new activation in a cluster takes
// over the blocks its node's view learned), then it publishes to view.
func NewCredentialsActor(clk clock.Clock, creds []Credential, policy CredentialsPolicy, view *CredentialsView) *CredentialsActor {
	a := &CredentialsActor{clk: clk, sticky: map[string]int{}, autoRedeem: policy.AutoRedeem, view: view, provider: policy.Provider}
	for _, c := range creds {
		until, _ := view.Until(c.Name)
		a.creds = append(a.creds, credentialState{Credential: c, blockedUntil: until})
	}
	if policy.Budget.Enabled {
		a.budget = retry.NewBudget(policy.Budget)
		a.holders = map[string]*actor.PID{}
	}
	if policy.Pacing && len(creds) > 0 {
		a.pacing = newPacingState(clk.Now(), creds, policy)
	}
	view.publish(a)
	return a
}

// Receive answers SelectCredential, MarkUsageLimitReached, ReleaseSession
// and the retry budget's messages.
func (a *CredentialsActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.SelectCredential:
		a.selectCredential(ctx, m)
	case *messages.PacingSettle:
		a.settlePacing(ctx, m)
	case *messages.PacingObserve:
		a.observePacing(ctx, m)
	case *messages.PacingCancel:
		a.cancelPacing(ctx, m.GetSessionId(), m.GetToken())
	case *messages.PacingTick:
		a.releasePacing(ctx)
	case *actor.Stopping:
		a.pacing.stop()
	case *messages.MarkUsageLimitReached:
		reply := a.markLimited(m)
		a.view.publish(a) // before the answer: the sessions read it
		respond(ctx, a.clk, reply)
	case *messages.ReleaseSession:
		a.cancelPacing(ctx, m.GetSessionId(), 0)
		delete(a.sticky, m.GetSessionId())
		a.forgetBudget(m.GetSessionId())
	case *messages.RetryBudgetRequest:
		respond(ctx, a.clk, a.admit(ctx, m))
		a.view.publish(a)
	case *messages.RetryBudgetDrop:
		a.forgetBudget(m.GetSessionId())
	case *messages.RetryBudgetOutcome:
		a.report(ctx, m.GetSuccess())
		a.view.publish(a)
	case *messages.RetryBudgetStatsRequest:
		// Asked by Runtime.RetryBudget's future: the reply is not counted
		// on the clock (track.RequestFuture), or a virtual clock would wait
		// for it forever.
		ctx.Respond(a.budgetStats())
	}
}

// forgetBudget drops what the retry budget holds for session.
func (a *CredentialsActor) forgetBudget(session string) {
	if a.budget != nil {
		a.budget.Forget(session)
		delete(a.holders, session)
	}
}

// budgetStats is the retry budget's state; zero without a budget.
func (a *CredentialsActor) budgetStats() *messages.RetryBudgetStats {
	var st retry.BudgetStats
	if a.budget != nil {
		st = a.budget.Stats()
	}
	return &messages.RetryBudgetStats{Tokens: st.Tokens, Held: int64(st.Held), Delayed: st.Delayed, Released: st.Released}
}

// admit asks the budget when a retry may go out; without a budget, at once.
func (a *CredentialsActor) admit(ctx actor.Context, m *messages.RetryBudgetRequest) *messages.RetryBudgetGrant {
	grant := &messages.RetryBudgetGrant{Token: m.GetToken(), AtUnixNano: m.GetDueUnixNano(), SessionId: m.GetSessionId()}
	if a.budget == nil {
		return grant
	}
	var latest time.Time
	if m.GetLatestUnixNano() != 0 {
		latest = time.Unix(0, m.GetLatestUnixNano())
	}
	due := time.Unix(0, m.GetDueUnixNano())
	at := a.budget.Admit(a.clk.Now(), m.GetSessionId(), m.GetToken(), due, latest)
	if at.After(due) && ctx.Sender() != nil {
		a.holders[m.GetSessionId()] = ctx.Sender()
	}
	grant.AtUnixNano = at.UnixNano()
	return grant
}

// report counts an outcome and sends the releases it frees.
func (a *CredentialsActor) report(ctx actor.Context, success bool) {
	if a.budget == nil {
		return
	}
	for _, h := range a.budget.Report(a.clk.Now(), success) {
		if pid := a.holders[h.Holder]; pid != nil {
			delete(a.holders, h.Holder)
			track.Send(ctx, a.clk, pid, &messages.RetryBudgetRelease{Token: h.Token, AtUnixNano: h.At.UnixNano(), SessionId: h.Holder})
		}
	}
}

// selectFor returns the session's sticky credential, choosing one (free,
// round-robin) the first time or when the sticky one is blocked.
func (a *CredentialsActor) selectFor(session string) string {
	if len(a.creds) == 0 {
		return ""
	}
	now := a.clk.Now()
	if i, ok := a.sticky[session]; ok && !a.creds[i].blockedUntil.After(now) {
		return a.creds[i].Name
	}
	i := a.firstFree(now, -1)
	if i < 0 {
		i = a.earliestFree()
	}
	a.sticky[session] = i
	return a.creds[i].Name
}

// firstFree finds an unblocked credential other than skip, round-robin.
func (a *CredentialsActor) firstFree(now time.Time, skip int) int {
	for k := range a.creds {
		i := (a.next + k) % len(a.creds)
		if i != skip && !a.creds[i].blockedUntil.After(now) {
			a.next = i + 1
			return i
		}
	}
	return -1
}

// indexOf is the index of key name, or -1.
func (a *CredentialsActor) indexOf(name string) int {
	for i := range a.creds {
		if a.creds[i].Name == name {
			return i
		}
	}
	return -1
}

func (a *CredentialsActor) earliestFree() int {
	best := 0
	for i := range a.creds {
		if a.creds[i].blockedUntil.Before(a.creds[best].blockedUntil) {
			best = i
		}
	}
	return best
}

// markLimited blocks the session's credential and switches it to a free
// sibling, or spends a banked reset (auto-redeem), or reports when the
// earliest blocked sibling frees up.
func (a *CredentialsActor) markLimited(m *messages.MarkUsageLimitReached) *messages.UsageLimitReply {
	reply := &messages.UsageLimitReply{Token: m.GetToken()}
	if len(a.creds) == 0 {
		return reply
	}
	now := a.clk.Now()
	current, ok := a.sticky[m.GetSessionId()]
	if !ok {
		current = 0
	}
	if i := a.indexOf(m.GetCredential()); i >= 0 { // an activation that moved has lost its sticky keys
		current = i
	}
	a.creds[current].blockedUntil = now.Add(time.Duration(max(m.GetBlockForMs(), 0)) * time.Millisecond)
	if a.pacing != nil {
		a.pacing.pacer.Block(a.creds[current].Name, a.creds[current].blockedUntil)
	}
	if i := a.firstFree(now, current); i >= 0 {
		a.sticky[m.GetSessionId()] = i
		reply.Switched, reply.Credential = true, a.creds[i].Name
		return reply
	}
	if i := a.redeem(current); i >= 0 {
		a.sticky[m.GetSessionId()] = i
		reply.Switched, reply.Redeemed, reply.Credential = true, true, a.creds[i].Name
		return reply
	}
	if earliest := a.siblingsFreeAt(now, current); !earliest.IsZero() {
		reply.RetryAtMs = earliest.UnixMilli()
	}
	return reply
}

// redeem spends a banked reset of the first credential from current on
// that has one, and unblocks it, when auto-redeem is on; it returns that
// credential's index, or -1.
func (a *CredentialsActor) redeem(current int) int {
	if !a.autoRedeem {
		return -1
	}
	for k := range a.creds {
		i := (current + k) % len(a.creds)
		if a.creds[i].BankedResets > 0 {
			a.creds[i].BankedResets--
			a.creds[i].blockedUntil = time.Time{}
			if a.pacing != nil {
				a.pacing.pacer.Block(a.creds[i].Name, time.Time{})
			}
			return i
		}
	}
	return -1
}

// siblingsFreeAt is when the first of the credentials other than current
// that are blocked at now frees up; zero when none is.
func (a *CredentialsActor) siblingsFreeAt(now time.Time, current int) time.Time {
	var earliest time.Time
	for i := range a.creds {
		if i != current && a.creds[i].blockedUntil.After(now) &&
			(earliest.IsZero() || a.creds[i].blockedUntil.Before(earliest)) {
			earliest = a.creds[i].blockedUntil
		}
	}
	return earliest
}
