package cluster

import (
	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages/protocol"
)

// The node's overload limiter (Provider.Overload): a credentials router
// keeps the places of its node's turns in its provider's models' limits
// (actors.Places), as Envoy keeps a limit per host; the activation, one
// for the whole cluster, keeps none. Its models start at the settings'
// Initial shared among the members (limiter). A paced selection (Pace:
// every turn under a limiter asks) names the router as its reply_to, so
// that what the activation answers, at once or later as a PacingGrant,
// comes back here for its place before it goes on to the session. The
// limiter learns from the settles of the node's turns, which pass
// through the router anyway: no message more than without it, but for a
// turn that waited for its pacing reservation (its grant comes through
// the router).

// routed is a paced selection the router passed on: its turn's token and
// session, until the activation answers it or grants its reservation.
type routed struct {
	token uint64
	to    *actor.PID
}

// selectCredential passes a selection on to the activation; with a
// limiter, a paced one names the router as its reply_to.
func (r *router) selectCredential(ctx actor.Context, m *protocol.SelectCredential) {
	if r.overload != nil && m.GetPace() {
		r.limiter()
		to := actors.PID(m.GetReplyTo())
		if to == nil {
			to = ctx.Sender()
		}
		r.routed[m.GetSessionId()] = routed{token: m.GetToken(), to: to}
		m.ReplyTo = actors.Ref(ctx.Self()) // the session sent m and is done with it
	}
	r.ask(ctx, ctx.Sender(), m, 1)
}

// limiter makes the node's limiter at its first paced selection, one of
// the members the node sees then (overload.Settings.Members): its models
// start at Initial shared among them (at least 1 each), so that the
// cluster's cold start is one runtime's, not Initial times its nodes
// (three nodes each starting at the default 100 sent 300 calls into a
// capacity of 200 in bench/storm's overload storm), and their growth of
// one a round after a decrease is shared too (three nodes each growing
// by one a round probed the capacity three times as fast: 28 decreases a
// node in its low window, against one runtime's 15).
func (r *router) limiter() {
	if r.places != nil {
		return
	}
	s := r.overload.WithDefaults()
	s.Members = r.members()
	r.places, r.routed = actors.NewPlaces(clock.Real{}, s, r.view), map[string]routed{}
}

// answer passes the reply to msg on to sender; a selection's, with a
// limiter, once its turn asked for its place (seat).
func (r *router) answer(ctx actor.Context, sender *actor.PID, msg proto.Message, reply any) {
	if m, ok := msg.(*protocol.SelectCredential); ok {
		if sel, ok := reply.(*protocol.CredentialSelected); ok {
			r.seat(ctx, m, sel)
		}
	}
	r.reply(ctx, sender, reply)
}

// seat asks the node's limiter for the place of the turn that reply
// answers: a reservation that waits asks for it with its grant; one too
// large for the keys never goes. A turn cancelled or released while the
// activation answered asks for none.
func (r *router) seat(ctx actor.Context, m *protocol.SelectCredential, reply *protocol.CredentialSelected) {
	t, ok := r.routed[m.GetSessionId()]
	if r.places == nil || !ok || t.token != m.GetToken() {
		return
	}
	switch {
	case reply.GetTooLarge() != "":
	case reply.GetWaitMs() > 0:
		r.places.PaceFirst(m)
		return // routed until its grant
	default:
		r.places.Seat(ctx, m, reply, t.to)
	}
	delete(r.routed, m.GetSessionId())
}

// relay passes a paced turn's grant on to its session once the turn has
// a place; until then the session is told it waits (actors.Places.
// SeatPaced). A grant of a turn no longer routed (cancelled) is dropped.
func (r *router) relay(ctx actor.Context, g *protocol.PacingGrant) {
	t, ok := r.routed[g.GetSessionId()]
	if !ok || t.token != g.GetToken() {
		return
	}
	delete(r.routed, g.GetSessionId())
	if r.places.SeatPaced(ctx, g, t.to) {
		ctx.Send(t.to, g)
	}
}

// limit hands a settle, a cancel or a session's release to the node's
// limiter, which frees places (and sends the grants of the turns that
// take them); a cancelled or released turn is no longer routed.
func (r *router) limit(ctx actor.Context, msg proto.Message) {
	if r.places == nil {
		return
	}
	r.places.Limit(ctx, msg)
	switch m := msg.(type) {
	case *protocol.PacingCancel:
		if t, ok := r.routed[m.GetSessionId()]; ok && t.token == m.GetToken() {
			delete(r.routed, m.GetSessionId())
		}
	case *protocol.ReleaseSession:
		delete(r.routed, m.GetSessionId())
	}
}
