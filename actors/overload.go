package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/pacing"
)

// places are the sessions' places in the provider's models' concurrency
// limits (overload.Limiter): a session's turn holds one while it is in
// flight, or waits for one. A turn is one call to the limiter, named by
// its session (a session has one turn out at a time). A paced turn asks
// for its place once its reservation is granted.
type places struct {
	limiter *overload.Limiter
	turns   map[string]place // by session
	view    *CredentialsView // where each model's limit is published (nil: nowhere)
}

// place is a session's turn: its token, model and priority, and while it
// waits for a place the grant that ends its wait (and where it goes).
type place struct {
	token    uint64
	key      overload.Key
	priority pacing.Priority
	grant    *protocol.PacingGrant // nil: in flight
	to       *actor.PID
	paced    bool // it waits for its reservation: no place asked yet
}

// newPlaces keeps the limits of a provider's models with s (nil: none,
// no limiter), publishing them to view.
func newPlaces(s *overload.Settings, view *CredentialsView) *places {
	if s == nil {
		return nil
	}
	return &places{limiter: overload.New(*s), turns: map[string]place{}, view: view}
}

// turn is the place of the turn of session (token) on model, of priority.
func turn(token uint64, model string, priority int32) place {
	return place{token: token, key: overload.Key{Provider: providerOf(model), Model: modelOf(model)}, priority: pacing.PriorityOf(priority)}
}

// acquire asks a place for t, the turn of session whose wait would end
// with grant, sent to to; true: it is in flight; false: it waits, and
// acquire says how many wait.
func (p *places) acquire(session string, t place, grant *protocol.PacingGrant, to *actor.PID) (bool, int) {
	p.view.setLimit(t.key, p.limiter.Limit(t.key)) // the model known from its first call
	if p.limiter.Acquire(session, t.key, t.priority) {
		p.turns[session] = t
		return true, 0
	}
	t.grant, t.to = grant, to
	p.turns[session] = t
	w := p.limiter.Waiting(t.key)
	return false, w[0] + w[1] + w[2]
}

// release ends the turn of session (token; 0: whichever) at now with o:
// one waiting is forgotten, one in flight frees its place; it returns the
// waiting turns that go now.
func (p *places) release(now time.Time, session string, token uint64, o overload.Outcome) []place {
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
		return nil
	}
	var out []place
	granted := p.limiter.Release(now, session, o)
	p.view.setLimit(t.key, p.limiter.Limit(t.key))
	for _, g := range granted {
		w := p.turns[g.ID]
		out = append(out, w)
		p.turns[g.ID] = place{token: w.token, key: w.key, priority: w.priority}
	}
	return out
}

// seat asks a place for the turn that reply answers, its reservation
// granted or nothing to reserve (after the place a turn of the session
// left behind is given up): granted, reply goes as it is, with the turn's
// token; full, the turn waits and reply says how many wait. With no
// limiter, or a turn that does not ask, reply goes as it is.
func (a *CredentialsActor) seat(ctx actor.Context, m *protocol.SelectCredential, reply *protocol.CredentialSelected, to *actor.PID) {
	if a.places != nil && m.GetPace() {
		session := m.GetSessionId()
		a.grant(ctx, a.places.release(a.clk.Now(), session, 0, overload.Outcome{}))
		grant := &protocol.PacingGrant{SessionId: session, Token: m.GetToken(), Credential: reply.Credential, Switched: reply.Switched}
		reply.Token = m.GetToken()
		if ok, queued := a.places.acquire(session, turn(m.GetToken(), m.GetModel(), m.GetPriority()), grant, to); !ok {
			reply.Queued, reply.Switched = int32(queued), false
		}
	}
	respond(ctx, a.clk, reply)
}

// paceFirst notes a turn that waits for its reservation: its grant asks
// for its place (seatPaced).
func (a *CredentialsActor) paceFirst(m *protocol.SelectCredential) {
	if a.places != nil {
		t := turn(m.GetToken(), m.GetModel(), m.GetPriority())
		t.paced = true
		a.places.turns[m.GetSessionId()] = t
	}
}

// seatPaced asks a place for a paced turn whose reservation was granted
// (g); false: it waits for it (its session is told so, and how many
// wait), and its grant goes when it has one.
func (a *CredentialsActor) seatPaced(ctx actor.Context, g *protocol.PacingGrant, to *actor.PID) bool {
	if a.places == nil {
		return true
	}
	t, ok := a.places.turns[g.GetSessionId()]
	if !ok || !t.paced || t.token != g.GetToken() {
		return true
	}
	t.paced = false
	granted, queued := a.places.acquire(g.GetSessionId(), t, g, to)
	if !granted && to != nil {
		track.Send(ctx, a.clk, to, &protocol.CredentialSelected{Credential: g.GetCredential(), Token: g.GetToken(), Queued: int32(queued)})
	}
	return granted
}

// limit hands a settle, a cancel or a session's release to the limiter,
// and sends the waiting turns that go now their grants.
func (a *CredentialsActor) limit(ctx actor.Context, msg any) {
	if a.places == nil {
		return
	}
	now := a.clk.Now()
	switch m := msg.(type) {
	case *protocol.PacingSettle:
		a.grant(ctx, a.places.release(now, m.GetSessionId(), m.GetToken(), overload.Outcome{Result: overload.Result(m.GetOverload()),
			FirstToken: time.Duration(m.GetFirstTokenMs()) * time.Millisecond}))
	case *protocol.PacingCancel:
		a.grant(ctx, a.places.release(now, m.GetSessionId(), m.GetToken(), overload.Outcome{}))
	case *protocol.ReleaseSession:
		a.grant(ctx, a.places.release(now, m.GetSessionId(), 0, overload.Outcome{}))
	}
}

// grant sends the turns that have a place now their grants.
func (a *CredentialsActor) grant(ctx actor.Context, granted []place) {
	for _, g := range granted {
		a.keys.Keep(g.grant.GetSessionId(), g.grant.GetCredential())
		if g.to != nil {
			track.Send(ctx, a.clk, g.to, g.grant)
		}
	}
}
