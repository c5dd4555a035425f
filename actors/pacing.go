package actors

import (
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/provider/ratelimit"
)

// pacingState is a credentials actor's pacing: the budgets of its keys,
// the turns they granted and not yet settled, the turns that wait, the
// estimates of what answers use and of how the provider counts input, and
// the timer that releases the waiting.
type pacingState struct {
	pacer   *pacing.Pacer
	output  pacing.OutputEstimator
	input   pacing.InputScale
	granted map[string]reservation // session -> its turn's reservation
	waiting map[string]reservation // session -> its waiting turn
	timer   clock.Timer            // the next release, while turns wait
	due     time.Time              // when timer fires
}

// reservation is one turn's: its token and its key (the pacer holds
// what it reserved), its model, its input as estimated and whether its
// output was an estimate (its answer teaches both), and who waits for it
// (waiting turns).
type reservation struct {
	token      uint64
	credential string
	model      string
	input      int64
	estimated  bool
	waiter     *actor.PID
}

func newPacingState(now time.Time, creds []Credential, policy CredentialsPolicy) *pacingState {
	names := make([]string, len(creds))
	limits := map[string]pacing.Limits{}
	for i, c := range creds {
		names[i] = c.Name
		limits[c.Name] = c.RateLimits
	}
	return &pacingState{pacer: pacing.New(names, limits, now, pacing.Options{Refunds: policy.Refunds, StickyWait: policy.StickyWait, Window: policy.Window}),
		granted: map[string]reservation{}, waiting: map[string]reservation{}}
}

// stop stops the release timer (nil: pacing off).
func (p *pacingState) stop() {
	if p != nil && p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
}

// selectCredential answers SelectCredential: the session's key, and with
// pacing the reservation of its turn's need (its estimated input, and its
// max_tokens or what its model's answers use): granted on that key or
// the one with the most room, a wait that a PacingGrant ends, or too
// large for every key.
func (a *CredentialsActor) selectCredential(ctx actor.Context, m *messages.SelectCredential) {
	session := m.GetSessionId()
	name := a.keys.Select(a.clk.Now(), session)
	reply := &messages.CredentialSelected{Credential: name}
	p := a.pacing
	if p == nil || !m.GetPace() || !p.pacer.Paced() {
		// Nothing to reserve: every key answered without rate-limit headers
		// and has no limit configured. The answer has no token, so the turn
		// holds no reservation and settles none.
		respond(ctx, a.clk, reply)
		return
	}
	reply.Token = m.GetToken()
	a.cancelPacing(ctx, session, 0) // a turn of the session's left unsettled (a lost answer)
	now := a.clk.Now()
	need := pacing.Need{Input: p.input.Scale(m.GetModel(), m.GetInputTokens()), Output: m.GetOutputTokens(), Bounded: m.GetOutputBounded()}
	if !need.Bounded {
		need.Output = p.output.Estimate(m.GetModel())
	}
	d := p.pacer.Reserve(now, session, pacing.PriorityOf(m.GetPriority()), name, need)
	r := reservation{token: m.GetToken(), credential: d.Credential, model: m.GetModel(), input: m.GetInputTokens(), estimated: !need.Bounded}
	switch {
	case d.TooLarge.Limit > 0:
		reply.Token, reply.TooLarge = 0, oversize(a.provider, d)
	case d.Wait > 0:
		if r.waiter = PID(m.GetReplyTo()); r.waiter == nil {
			r.waiter = ctx.Sender()
		}
		p.waiting[session] = r
		// The wait names the key the session holds; the grant says when it
		// goes out on another (switched).
		reply.WaitMs, reply.Limit = max(d.Wait.Milliseconds(), 1), d.Limit.String()
		a.armRelease(ctx)
	default:
		p.granted[session] = r
		a.keys.Keep(session, d.Credential)
		reply.Credential, reply.Switched = d.Credential, d.Switched
	}
	a.view.publish(a)
	respond(ctx, a.clk, reply)
}

// oversize is the error of a turn that no key of provider can ever take:
// it needs more of a limit than a whole window holds. Its words classify
// as not retryable (no status, no rate-limit wording): retrying never
// makes it fit.
func oversize(provider string, d pacing.Decision) string {
	return fmt.Sprintf("pacing: the turn needs %d %s, more than any key of provider %q may use in a minute (key %s: %d); it was not sent",
		d.TooLarge.Need, strings.ReplaceAll(d.TooLarge.Kind.String(), "_", " "), provider, d.Credential, d.TooLarge.Limit)
}

// settlePacing ends a turn's reservation with what it used (its input
// teaches the input scale, an estimated output the output estimate) and
// takes the limits its response
// announced, if they did not come as its headers arrived
// (observePacing), then releases the turns that fit now.
func (a *CredentialsActor) settlePacing(ctx actor.Context, m *messages.PacingSettle) {
	p := a.pacing
	if p == nil {
		return
	}
	now := a.clk.Now()
	if l := m.GetLimits(); l != nil { // before the settle: the grant tells what the response counted
		p.pacer.Observe(now, m.GetCredential(), m.GetSessionId(), now, ratelimit.FromProto(l))
	}
	if r, ok := p.granted[m.GetSessionId()]; ok && r.token == m.GetToken() {
		delete(p.granted, m.GetSessionId())
		p.pacer.Settle(now, m.GetSessionId(),
			pacing.Usage{Sent: m.GetSent(), Input: m.GetInputTokens(), Output: m.GetOutputTokens(), Refused: m.GetRefused(),
				RetryAfter: time.Duration(m.GetRetryAfterMs()) * time.Millisecond})
		p.input.Observe(r.model, r.input, m.GetInputTokens()+m.GetCachedInputTokens())
		if r.estimated {
			p.output.Observe(r.model, m.GetOutputTokens())
		}
	}
	a.releasePacing(ctx)
}

// observePacing takes the limits a response announced as its headers
// arrived, and releases the turns that fit now: a cold key's first
// headers end its cold start.
func (a *CredentialsActor) observePacing(ctx actor.Context, m *messages.PacingObserve) {
	p := a.pacing
	if p == nil {
		return
	}
	p.pacer.Observe(a.clk.Now(), m.GetCredential(), m.GetSessionId(), time.UnixMilli(m.GetArrivedUnixMs()), ratelimit.FromProto(m.GetLimits()))
	a.releasePacing(ctx)
}

// cancelPacing drops the session's reservation of token (0: any): a
// waiting turn leaves the queue, a granted one never sent gives back what
// it reserved.
func (a *CredentialsActor) cancelPacing(ctx actor.Context, session string, token uint64) {
	p := a.pacing
	if p == nil {
		return
	}
	if r, ok := p.waiting[session]; ok && (token == 0 || r.token == token) {
		delete(p.waiting, session)
		p.pacer.Cancel(session)
	}
	if r, ok := p.granted[session]; ok && (token == 0 || r.token == token) {
		delete(p.granted, session)
		p.pacer.Settle(a.clk.Now(), session, pacing.Usage{})
	}
	a.releasePacing(ctx)
}

// releasePacing grants the waiting turns that fit now, in priority order,
// and arms the timer for the next.
func (a *CredentialsActor) releasePacing(ctx actor.Context) {
	p := a.pacing
	if p == nil || len(p.waiting) == 0 {
		return
	}
	for _, g := range p.pacer.Release(a.clk.Now()) {
		r, ok := p.waiting[g.ID]
		if !ok {
			continue
		}
		delete(p.waiting, g.ID)
		waiter := r.waiter
		r.credential, r.waiter = g.Credential, nil
		p.granted[g.ID] = r
		a.keys.Keep(g.ID, g.Credential)
		if waiter != nil {
			track.Send(ctx, a.clk, waiter, &messages.PacingGrant{SessionId: g.ID, Token: r.token,
				Credential: g.Credential, Switched: g.Switched})
		}
	}
	a.armRelease(ctx)
	a.view.publish(a)
}

// armRelease arms the release timer for the first waiting turn, unless it
// is armed for then already; with none waiting it stops it.
func (a *CredentialsActor) armRelease(ctx actor.Context) {
	p := a.pacing
	now := a.clk.Now()
	next, ok := p.pacer.NextRelease(now)
	if !ok {
		p.stop()
		return
	}
	if p.timer != nil && p.due.Equal(next) {
		return
	}
	p.stop()
	clk, root, self := a.clk, ctx.ActorSystem().Root, ctx.Self()
	p.due = next
	p.timer = clk.AfterFunc(next.Sub(now), func() { track.Send(root, clk, self, &messages.PacingTick{}) })
}
