package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/pacing"
)

// Places are the sessions' places in one provider's models' concurrency
// limits (overload.Limiter): a session's turn holds one while it is in
// flight, or waits for one. A turn is one call to the limiter, named by
// its session (a session has one turn out at a time). A paced turn asks
// for its place once its reservation is granted.
//
// A runtime's credentials actor keeps its provider's (CredentialsPolicy.
// Overload); in a cluster, where that actor is one for all nodes, each
// node's stand-in for it keeps its own, as Envoy keeps a limit per host
// (package cluster). An actor owns them: they are not safe for
// concurrent use. A nil *Places is no limiter: its methods do nothing.
type Places struct {
	clk     clock.Clock
	limiter *overload.Limiter
	turns   map[string]place                 // by session
	view    *CredentialsView                 // where each model's figures are published (nil: nowhere)
	keep    func(session, credential string) // a granted turn's key made its session's (nil: none)
}

// place is a session's turn: its token, model and priority, and while it
// waits for a place the grant that ends its wait (and where it goes).
type place struct {
	token    uint64
	key      overload.Key
	priority pacing.Priority
	grant    *protocol.PacingGrant // nil: in flight
	to       *actor.PID
	since    time.Time // when its wait for a place began
	paced    bool      // it waits for its reservation: no place asked yet
}

// NewPlaces keeps the limits of a provider's models with s (zero fields:
// the defaults) on clk, publishing them to view (nil: nowhere), for
// Runtime.ConcurrencyLimit.
func NewPlaces(clk clock.Clock, s overload.Settings, view *CredentialsView) *Places {
	return &Places{clk: clk, limiter: overload.New(s), turns: map[string]place{}, view: view}
}

// turn is the place of the turn of session (token) on model, of priority.
func turn(token uint64, model string, priority int32) place {
	return place{token: token, key: overload.Key{Provider: providerOf(model), Model: modelOf(model)}, priority: pacing.PriorityOf(priority)}
}

// acquire asks a place for t, the turn of session whose wait would end
// with grant, sent to to; true: it is in flight; false: it waits, and
// acquire says how many wait.
func (p *Places) acquire(session string, t place, grant *protocol.PacingGrant, to *actor.PID) (bool, int) {
	ok := p.limiter.Acquire(session, t.key, t.priority)
	p.publish(t.key) // the model known from its first call
	if ok {
		p.turns[session] = t
		return true, 0
	}
	t.grant, t.to, t.since = grant, to, p.clk.Now()
	p.turns[session] = t
	w := p.limiter.Waiting(t.key)
	return false, w[0] + w[1] + w[2]
}

// fallBack seats t, whose model's limit is full, on the first of
// fallbacks whose limit has room (overload.Limiter.TryAcquire), and names
// it; false when t's model has room, or none of them does.
func (p *Places) fallBack(session string, t place, fallbacks []string) (string, bool) {
	if len(fallbacks) == 0 || p.limiter.HasRoom(t.key) {
		return "", false
	}
	for _, model := range fallbacks {
		f := t
		f.key = overload.Key{Provider: providerOf(model), Model: modelOf(model)}
		if p.limiter.TryAcquire(session, f.key) {
			p.turns[session] = f
			p.publish(f.key)
			return model, true
		}
	}
	return "", false
}

// release ends the turn of session (token; 0: whichever) at now with o:
// one waiting is forgotten, one in flight frees its place; it returns the
// waiting turns that go now.
func (p *Places) release(now time.Time, session string, token uint64, o overload.Outcome) []place {
	t, ok := p.turns[session]
	if !ok || token != 0 && t.token != token {
		return nil
	}
	delete(p.turns, session)
	switch {
	case t.paced:
		return nil
	case t.grant != nil:
		p.limiter.Cancel(session)
		p.view.waitEnded(t.key, t.priority, t.since, now)
		return nil
	}
	var out []place
	granted := p.limiter.Release(now, session, o)
	p.publish(t.key)
	for _, g := range granted {
		w := p.turns[g.ID]
		p.view.waitEnded(w.key, w.priority, w.since, now)
		out = append(out, w)
		p.turns[g.ID] = place{token: w.token, key: w.key, priority: w.priority}
	}
	return out
}

// publish writes key's limit and calls in flight to the view.
func (p *Places) publish(key overload.Key) {
	p.view.setLoad(key, Load{Limit: p.limiter.Limit(key), InFlight: p.limiter.InFlight(key)})
}

// Seat asks a place for the turn of m that reply answers, its reservation
// granted or nothing to reserve (after the place a turn of the session
// left behind is given up): granted, reply gets the turn's token; full,
// the turn waits and reply says how many wait, and its grant goes to to
// when it has a place. A turn that does not ask (m not paced) is left as
// it is. The caller sends reply.
func (p *Places) Seat(ctx actor.Context, m *protocol.SelectCredential, reply *protocol.CredentialSelected, to *actor.PID) {
	if p == nil || !m.GetPace() {
		return
	}
	session := m.GetSessionId()
	p.grant(ctx, p.release(p.clk.Now(), session, 0, overload.Outcome{}))
	grant := &protocol.PacingGrant{SessionId: session, Token: m.GetToken(), Credential: reply.Credential, Switched: reply.Switched}
	reply.Token = m.GetToken()
	t := turn(m.GetToken(), m.GetModel(), m.GetPriority())
	if fallback, ok := p.fallBack(session, t, m.GetFallbacks()); ok {
		reply.Model = fallback
	} else if ok, queued := p.acquire(session, t, grant, to); !ok {
		reply.Queued, reply.Switched = int32(queued), false
	}
}

// PaceFirst notes the turn of m that waits for its reservation: its
// grant asks for its place (SeatPaced).
func (p *Places) PaceFirst(m *protocol.SelectCredential) {
	if p == nil {
		return
	}
	t := turn(m.GetToken(), m.GetModel(), m.GetPriority())
	t.paced = true
	p.turns[m.GetSessionId()] = t
}

// SeatPaced asks a place for a paced turn whose reservation was granted
// (g); false: it waits for it (its session, to, is told so and how many
// wait, and g goes when it has one). True, g goes now: with no limiter,
// and for a turn PaceFirst did not note.
func (p *Places) SeatPaced(ctx actor.Context, g *protocol.PacingGrant, to *actor.PID) bool {
	if p == nil {
		return true
	}
	t, ok := p.turns[g.GetSessionId()]
	if !ok || !t.paced || t.token != g.GetToken() {
		return true
	}
	t.paced = false
	granted, queued := p.acquire(g.GetSessionId(), t, g, to)
	if !granted && to != nil {
		track.Send(ctx, p.clk, to, &protocol.CredentialSelected{Credential: g.GetCredential(), Token: g.GetToken(), Queued: int32(queued)})
	}
	return granted
}

// Limit hands a settle (PacingSettle), a cancel (PacingCancel) or a
// session's release (ReleaseSession) to the limiter, and sends the
// waiting turns that go now their grants; other messages are not its.
func (p *Places) Limit(ctx actor.Context, msg any) {
	if p == nil {
		return
	}
	now := p.clk.Now()
	switch m := msg.(type) {
	case *protocol.PacingSettle:
		p.grant(ctx, p.release(now, m.GetSessionId(), m.GetToken(), overload.Outcome{Result: overload.Result(m.GetOverload()),
			FirstToken: time.Duration(m.GetFirstTokenMs()) * time.Millisecond}))
	case *protocol.PacingCancel:
		p.grant(ctx, p.release(now, m.GetSessionId(), m.GetToken(), overload.Outcome{}))
	case *protocol.ReleaseSession:
		p.grant(ctx, p.release(now, m.GetSessionId(), 0, overload.Outcome{}))
	}
}

// grant sends the turns that have a place now their grants.
func (p *Places) grant(ctx actor.Context, granted []place) {
	for _, g := range granted {
		if p.keep != nil {
			p.keep(g.grant.GetSessionId(), g.grant.GetCredential())
		}
		if g.to != nil {
			track.Send(ctx, p.clk, g.to, g.grant)
		}
	}
}
