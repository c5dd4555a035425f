package actors

import (
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/provider/ratelimit"
)

// newReservations are the reservations of creds' turns as policy paces
// them, their grants going to the turns' sessions.
func newReservations(now time.Time, creds []Credential, policy CredentialsPolicy) *pacing.Reservations[*actor.PID] {
	names := make([]string, len(creds))
	limits := map[string]pacing.Limits{}
	for i, c := range creds {
		names[i] = c.Name
		limits[c.Name] = c.RateLimits
	}
	return pacing.NewReservations[*actor.PID](names, limits, now,
		pacing.Options{Refunds: policy.Refunds, StickyWait: policy.StickyWait, Window: policy.Window})
}

// selectCredential answers SelectCredential: the session's key, and with
// pacing the reservation of its turn's need (pacing.Reservations.Reserve):
// granted on that key or the one with the most room, a wait that a
// PacingGrant ends, or too large for every key.
func (a *CredentialsActor) selectCredential(ctx actor.Context, m *protocol.SelectCredential) {
	session := m.GetSessionId()
	now := a.clk.Now()
	reply := &protocol.CredentialSelected{Credential: a.keys.Select(now, session)}
	to := ctx.Sender()
	if ref := m.GetReplyTo(); ref != nil {
		to = PID(ref)
	}
	if a.pacing == nil || !m.GetPace() {
		a.seat(ctx, m, reply, to)
		return
	}
	d, paced, released := a.pacing.Reserve(now, pacing.Turn[*actor.PID]{Session: session, Ticket: m.GetToken(),
		Priority: pacing.PriorityOf(m.GetPriority()), Prefer: reply.Credential, Model: m.GetModel(),
		Need: pacing.Need{Input: m.GetInputTokens(), Output: m.GetOutputTokens(), Bounded: m.GetOutputBounded()}, To: to})
	if !paced {
		// Nothing to reserve: the answer has no token (unless the turn holds
		// a place), so the turn holds no reservation and settles none.
		a.seat(ctx, m, reply, to)
		return
	}
	a.carryOut(ctx, released) // a turn that waits now arms the release timer there
	switch {
	case d.TooLarge.Limit > 0:
		reply.TooLarge = oversize(a.provider, d)
	case d.Wait > 0:
		// The wait names the key the session holds; the grant says when it
		// goes out on another (switched).
		reply.Token, reply.WaitMs, reply.Limit = m.GetToken(), max(d.Wait.Milliseconds(), 1), d.Limit.String()
		a.places.PaceFirst(m)
	default:
		a.keys.Keep(session, d.Credential)
		reply.Token, reply.Credential, reply.Switched = m.GetToken(), d.Credential, d.Switched
		a.view.publish(a)
		a.seat(ctx, m, reply, to)
		return
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

// pace hands a pacing message to the reservations (nothing with pacing
// off) and carries out what they release: a turn's settle, the limits its
// headers announced as they arrived, its cancel, its session's release
// (any reservation of it dropped), the release timer's tick.
func (a *CredentialsActor) pace(ctx actor.Context, msg any) {
	a.places.Limit(ctx, msg)
	p := a.pacing
	if p == nil {
		return
	}
	now := a.clk.Now()
	var released []pacing.Granted[*actor.PID]
	switch m := msg.(type) {
	case *protocol.PacingSettle:
		released = p.Settle(now, pacing.Settlement{Session: m.GetSessionId(), Ticket: m.GetToken(), Credential: m.GetCredential(),
			Limits: ratelimit.FromProto(m.GetLimits()), CachedInput: m.GetCachedInputTokens(),
			Used: pacing.Usage{Sent: m.GetSent(), Input: m.GetInputTokens(), Output: m.GetOutputTokens(), Refused: m.GetRefused(),
				RetryAfter: time.Duration(m.GetRetryAfterMs()) * time.Millisecond}})
	case *protocol.PacingObserve:
		released = p.Observe(now, m.GetCredential(), m.GetSessionId(), time.UnixMilli(m.GetArrivedUnixMs()), ratelimit.FromProto(m.GetLimits()))
	case *protocol.PacingCancel:
		released = p.Cancel(now, m.GetSessionId(), m.GetToken())
	case *protocol.ReleaseSession:
		released = p.Cancel(now, m.GetSessionId(), 0)
	case *pacingTick:
		released = p.Release(now)
	}
	a.carryOut(ctx, released)
}

// carryOut sends each released turn its grant, makes the key granted its
// session's, re-arms the release timer and publishes the view; nothing
// when nothing was released and no turn waits.
func (a *CredentialsActor) carryOut(ctx actor.Context, released []pacing.Granted[*actor.PID]) {
	if len(released) == 0 && a.pacing.Waiting() == 0 {
		return
	}
	for _, g := range released {
		grant := &protocol.PacingGrant{SessionId: g.ID, Token: g.Ticket, Credential: g.Credential, Switched: g.Switched}
		if !a.places.SeatPaced(ctx, grant, g.To) {
			continue // it waits for a place now
		}
		a.keys.Keep(g.ID, g.Credential)
		if g.To != nil {
			track.Send(ctx, a.clk, g.To, grant)
		}
	}
	a.armRelease(ctx)
	a.view.publish(a)
}

// armRelease arms the release timer for when the next waiting turn should
// go, unless it is armed for then already; with none waiting it stops it.
func (a *CredentialsActor) armRelease(ctx actor.Context) {
	now := a.clk.Now()
	next, ok := a.pacing.NextRelease(now)
	if ok && a.release != nil && a.releaseAt.Equal(next) {
		return
	}
	a.stopRelease()
	if !ok {
		return
	}
	clk, root, self := a.clk, ctx.ActorSystem().Root, ctx.Self()
	a.releaseAt = next
	a.release = clk.AfterFunc(next.Sub(now), func() { track.Send(root, clk, self, &pacingTick{}) })
}

// stopRelease stops the release timer.
func (a *CredentialsActor) stopRelease() {
	if a.release != nil {
		a.release.Stop()
		a.release = nil
	}
}
