package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/credentials"
	"github.com/musepi/musepi/internal/mailbox"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/retry"
)

// Credential is one API key of a provider (musepi.WithProvider, which
// names it musepi.Credential). NewRuntime refuses a credential without a
// key: a provider whose server needs no key is given no credentials, and no
// adapter fills a missing key in from the environment (OPENAI_API_KEY,
// ANTHROPIC_API_KEY).
type Credential struct {
	// Name names the credential in events and logs (never the key); unique
	// within its provider, not empty.
	Name string
	// APIKey is the key sent with the credential's calls. Exactly one of
	// APIKey and APIKeyEnv is set.
	APIKey string
	// APIKeyEnv names the environment variable holding the key, which
	// NewRuntime reads (leading and trailing spaces trimmed) into APIKey
	// before the credential reaches its actor; it refuses a variable that
	// is not set or is empty, naming the credential.
	APIKeyEnv string
	// BankedResets is how many usage-limit resets this credential may
	// spend when no sibling credential is free (only with auto-redeem on:
	// musepi.WithAutoRedeem).
	BankedResets int
	// RateLimits are the credential's per-minute limits, which pace its
	// turns until the provider's responses announce the limits (and for
	// servers that announce none). None: the provider's
	// (musepi.WithRateLimits).
	RateLimits pacing.Limits
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
	// Overload keeps a concurrency limit per model (overload.Limiter):
	// a turn that finds its model's limit full waits for a place (nil:
	// no limit).
	Overload *overload.Settings
}

// CredentialsActor carries out, for one provider, what its pure parts
// decide: which key each session uses (credentials.Selector), the
// reservations of its paced turns on its keys' rate-limit budgets
// (pacing.Reservations, when pacing is on: the actor sends their grants
// and arms their release timer) and the retry budget (retry.Budget, when
// there is one).
type CredentialsActor struct {
	clk  clock.Clock
	keys *credentials.Selector

	budget *retry.Budget[*actor.PID] // nil: no budget; a hold's release goes to its session

	pacing    *pacing.Reservations[*actor.PID] // nil: pacing off; a waiting turn's grant goes to its session
	release   clock.Timer                      // the next release, while turns wait
	releaseAt time.Time                        // when release fires
	provider  string                           // the provider's name

	places *Places // the overload limiter's places (nil: no limiter)

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
	a := &CredentialsActor{clk: clk, view: view, provider: policy.Provider}
	if policy.Budget.Enabled {
		a.budget = retry.NewBudget[*actor.PID](policy.Budget)
	}
	keys := make([]credentials.Key, len(creds))
	for i, c := range creds {
		keys[i] = credentials.Key{Name: c.Name, BankedResets: c.BankedResets}
	}
	var blocker credentials.Blocker // the pacer, which keeps turns off blocked keys
	if policy.Pacing && len(creds) > 0 {
		a.pacing = newReservations(clk.Now(), creds, policy)
		blocker = a.pacing.Pacer()
	}
	a.keys = credentials.New(keys, policy.AutoRedeem, blocker)
	if policy.Overload != nil {
		a.places = NewPlaces(clk, *policy.Overload, view)
		a.places.keep = a.keys.Keep
	}
	for _, c := range creds {
		if until, _ := view.Until(c.Name); !until.IsZero() {
			a.keys.Block(c.Name, until)
		}
	}
	view.publish(a)
	return a
}

// Receive answers SelectCredential, the pacing messages (pace),
// MarkUsageLimitReached, ReleaseSession and the retry budget's messages.
func (a *CredentialsActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *protocol.SelectCredential:
		a.selectCredential(ctx, m)
	case *protocol.PacingSettle, *protocol.PacingObserve, *protocol.PacingCancel, *pacingTick:
		a.pace(ctx, m)
	case *actor.Stopping:
		a.stopRelease()
	case *protocol.MarkUsageLimitReached:
		reply := a.markLimited(m)
		a.view.publish(a) // before the answer: the sessions read it
		respond(ctx, a.clk, reply)
	case *protocol.ReleaseSession:
		a.pace(ctx, m) // its reservation, if any, dropped
		a.keys.Forget(m.GetSessionId())
		a.forgetBudget(m.GetSessionId())
	case *protocol.RetryBudgetRequest:
		respond(ctx, a.clk, a.admit(ctx, m))
		a.view.publish(a)
	case *protocol.RetryBudgetDrop:
		a.forgetBudget(m.GetSessionId())
	case *protocol.RetryBudgetOutcome:
		a.report(ctx, m.GetSuccess())
		a.view.publish(a)
	case *protocol.RetryBudgetStatsRequest:
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
	}
}

// budgetStats is the retry budget's state; zero without a budget.
func (a *CredentialsActor) budgetStats() *protocol.RetryBudgetStats {
	var st retry.BudgetStats
	if a.budget != nil {
		st = a.budget.Stats()
	}
	return &protocol.RetryBudgetStats{Tokens: st.Tokens, Held: int64(st.Held), Delayed: st.Delayed, Released: st.Released}
}

// admit asks the budget when a retry may go out; without a budget, at once.
func (a *CredentialsActor) admit(ctx actor.Context, m *protocol.RetryBudgetRequest) *protocol.RetryBudgetGrant {
	grant := &protocol.RetryBudgetGrant{Token: m.GetToken(), AtUnixNano: m.GetDueUnixNano(), SessionId: m.GetSessionId()}
	if a.budget == nil {
		return grant
	}
	var latest time.Time
	if m.GetLatestUnixNano() != 0 {
		latest = time.Unix(0, m.GetLatestUnixNano())
	}
	to := PID(m.GetReplyTo())
	if to == nil {
		to = ctx.Sender()
	}
	at := a.budget.Admit(a.clk.Now(), m.GetSessionId(), m.GetToken(), time.Unix(0, m.GetDueUnixNano()), latest, to)
	grant.AtUnixNano = at.UnixNano()
	return grant
}

// report counts an outcome and sends the releases it frees.
func (a *CredentialsActor) report(ctx actor.Context, success bool) {
	if a.budget == nil {
		return
	}
	for _, h := range a.budget.Report(a.clk.Now(), success) {
		if h.To != nil {
			track.Send(ctx, a.clk, h.To, &protocol.RetryBudgetRelease{Token: h.Ticket, AtUnixNano: h.At.UnixNano(), SessionId: h.Holder})
		}
	}
}

// markLimited blocks the session's key and switches it to a free
// sibling, or spends a banked reset (auto-redeem), or reports when the
// earliest blocked sibling frees up (credentials.Selector.Limited).
func (a *CredentialsActor) markLimited(m *protocol.MarkUsageLimitReached) *protocol.UsageLimitReply {
	sw := a.keys.Limited(a.clk.Now(), m.GetSessionId(), m.GetCredential(), time.Duration(m.GetBlockForMs())*time.Millisecond)
	reply := &protocol.UsageLimitReply{Token: m.GetToken(), Switched: sw.Switched, Redeemed: sw.Redeemed, Credential: sw.Credential}
	if !sw.RetryAt.IsZero() {
		reply.RetryAtMs = sw.RetryAt.UnixMilli()
	}
	return reply
}

// seat asks a place for the turn that reply answers (Places.Seat), then
// sends reply.
func (a *CredentialsActor) seat(ctx actor.Context, m *protocol.SelectCredential, reply *protocol.CredentialSelected, to *actor.PID) {
	a.places.Seat(ctx, m, reply, to)
	respond(ctx, a.clk, reply)
}
