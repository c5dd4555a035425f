package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	protocluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/internal/hosting"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
)

// sessionHost is the session kind's activation (identity: the session
// id). Opened by a handle's SessionOpen, it opens the session's history
// from the shared store (taking the session's epoch) and hosts the
// session here as the runtime's own Session, to whose actor it forwards
// the handles' messages with their senders, so replies go straight back
// to the handles. It relays the session's events to the handles that
// listen. When it stops (its node leaves, or the topology moves the
// session) it hands the session over: see handover.
type sessionHost struct {
	node     *clusterNode
	id       string
	s        hosting.Local
	watchers map[string]*watcher // by the watcher's address and id
	closer   *actor.PID          // the SessionClose's sender, answered once stopped
	log      heldLog             // the session's history, once open
	backlog  *eventBacklog       // a resumed prompt's events, for the handles that listen
}

// maxBacklog bounds the events an activation keeps for the handles that
// listen later (see eventBacklog); the rest are relayed live only.
const maxBacklog = 1024

// eventBacklog is the event feed of a session opened with its prompt
// resumed from its record (its node died or left, or a durable timer
// woke it). The prompt's caller finds the new activation only after a
// while (its handle attaches once it notices the old one gone), and would
// otherwise miss what the chain emitted meanwhile (the next
// auto_retry_start among it). So the backlog keeps the resumed prompt's
// events, and every handle that starts listening gets them first, in
// order, then the session's later events through the same feed. Which
// handle listened first does not matter: a runtime-wide subscriber (the
// metrics of the node whose durable timer woke the session) takes nothing
// from the prompt's caller. The kept events go once a caller has attached
// to the prompt (AttachPrompt: it has them by then, if it listens) or the
// session starts its next prompt.
type eventBacklog struct {
	mu      sync.Mutex
	events  []*messages.SessionEvent
	keeping bool                  // no caller attached yet, and no later prompt began
	settled bool                  // the resumed prompt's agent_settled is among events
	to      map[string]*actor.PID // the handles relayed to, by watcher key
	send    func(pid *actor.PID, ev *messages.SessionEvent)
	// unsubscribe ends the feed's subscription to the session.
	unsubscribe func()
}

// newEventBacklog is an empty backlog relaying with send.
func newEventBacklog(send func(pid *actor.PID, ev *messages.SessionEvent)) *eventBacklog {
	return &eventBacklog{keeping: true, to: map[string]*actor.PID{}, send: send}
}

// add keeps ev (while keeping) and relays it to the handles that listen.
func (b *eventBacklog) add(ev *messages.SessionEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ev.GetAgentStart() != nil && b.settled { // the next prompt: the resumed one's events are stale now
		b.stopKeeping()
	}
	if b.keeping && len(b.events) < maxBacklog {
		b.events = append(b.events, ev)
	}
	if ev.GetAgentSettled() != nil {
		b.settled = true
	}
	for _, pid := range b.to {
		b.send(pid, ev)
	}
}

// stopKeeping drops the kept events and keeps no more; b.mu is held.
func (b *eventBacklog) stopKeeping() {
	b.keeping, b.events = false, nil
}

// attached drops the kept events: a caller attached to the prompt.
func (b *eventBacklog) attached() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopKeeping()
}

// relayTo sends the kept events to the handle pid (watcher key key),
// then relays the later ones to it; it returns what stops that.
func (b *eventBacklog) relayTo(key string, pid *actor.PID) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ev := range b.events {
		b.send(pid, ev)
	}
	b.to[key] = pid
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.to, key)
	}
}

// watcher is a handle's relay.
type watcher struct {
	pid         *actor.PID
	unsubscribe func() // stops relaying events (nil: not relaying)
}

func (h *sessionHost) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		h.id = protocluster.GetClusterIdentity(ctx).GetIdentity()
		h.watchers = map[string]*watcher{}
		h.node.hosted(h.id, ctx.Self())
	case memberLeft:
		h.memberLeft(m.addr)
	case *protocol.SessionOpen:
		h.openFor(ctx, m)
	case *protocol.SessionWatch:
		h.watch(m.GetWatcherAddress(), m.GetWatcherId(), m.GetEvents())
		ctx.Respond(&protocol.Ack{})
	case *protocol.SessionStateRequest:
		if h.s == nil {
			ctx.Respond(&actor.DeadLetterResponse{Target: ctx.Self()})
			break
		}
		ctx.Respond(h.s.StateWire())

	case *protocol.AttachPrompt:
		h.forward(ctx, m)
		if h.backlog != nil {
			h.backlog.attached()
		}
	case *protocol.SessionClose:
		h.close(ctx)
	case *actor.Stopping:
		h.handover()
	case *actor.Stopped:
		// Told once the activation is out of the registry: a handle that
		// looks the session up again and finds this activation still
		// placed gets a dead letter, not a message lost in a mailbox.
		h.node.unhosted(h.id, ctx.Self())
		h.moved(ctx)
		if h.closer != nil {
			ctx.Send(h.closer, &protocol.Ack{})
		}
	case actor.SystemMessage, actor.AutoReceiveMessage:
	default:
		h.forward(ctx, m)
	}
}

// memberLeft stops relaying events to the handles on a node that left:
// nobody is there to tell.
func (h *sessionHost) memberLeft(addr string) {
	for key, w := range h.watchers {
		if w.pid.GetAddress() == addr {
			h.unwatch(key)
		}
	}
}

// openFor answers a handle's SessionOpen, and relays the session's events
// to it once it is open. A node that is leaving, or cannot open the
// session now (notHere), answers a dead letter, on which the handle looks
// the session up again, and the activation stops.
func (h *sessionHost) openFor(ctx actor.Context, m *protocol.SessionOpen) {
	reply := h.open(m)
	switch {
	case reply == nil:
		ctx.Respond(&actor.DeadLetterResponse{Target: ctx.Self()})
		ctx.Stop(ctx.Self())
		return
	case reply.GetError() == "":
		h.watch(m.GetWatcherAddress(), m.GetWatcherId(), m.GetEvents())
	}
	ctx.Respond(reply)
}

// close closes the session for a handle's SessionClose and stops the
// activation; the handle gets its Ack once the activation has stopped.
func (h *sessionHost) close(ctx actor.Context) {
	if h.s != nil {
		cctx, cancel := context.WithTimeout(context.Background(), h.node.cc.HandoverTimeout)
		if err := h.s.Close(cctx); err != nil {
			h.node.rt.Log().Warn("close session", slog.Any("error", err), slog.String("session", h.id))
		}
		cancel()
		h.s = nil
	}
	h.unwatchAll()
	h.closer = ctx.Sender()
	ctx.Stop(ctx.Self())
}

// forward hands a handle's message to the session's actor, with its
// sender. Before the session is open here (the handle opens it first,
// unless this activation replaced the one it opened) a request gets a
// dead letter, on which the handle looks the session up and opens it.
func (h *sessionHost) forward(ctx actor.Context, msg interface{}) {
	sender := ctx.Sender()
	if h.s == nil {
		if sender != nil {
			ctx.Respond(&actor.DeadLetterResponse{Target: ctx.Self()})
		}
		return
	}
	err := h.s.Deliver(func(pid *actor.PID) {
		if sender == nil {
			ctx.Send(pid, msg)
			return
		}
		ctx.RequestWithCustomSender(pid, msg, sender)
	})
	if err != nil { // the session was closed here: a new activation opens it again
		if sender != nil {
			ctx.Respond(&actor.DeadLetterResponse{Target: ctx.Self()})
		}
		h.s = nil
		ctx.Stop(ctx.Self())
	}
}

// open hosts the session here, as SessionOpen configures it (once: later
// opens find it open). It returns nil when the node is leaving or cannot
// open the session now (notHere).
func (h *sessionHost) open(m *protocol.SessionOpen) *protocol.SessionOpened {
	if h.s != nil {
		return &protocol.SessionOpened{State: h.s.StateWire()}
	}
	<-h.node.ready
	rt := h.node.rt
	if rt.Closed() {
		return nil
	}
	log, entries, err := h.openHistory()
	switch {
	case err != nil && notHere(err):
		h.node.rt.Log().Warn("cannot open the session on this node now; its handle looks it up again", slog.Any("error", err), slog.String("session", h.id))
		return nil
	case err != nil:
		return &protocol.SessionOpened{Error: fmt.Sprintf("open session %s: %v", h.id, err)}
	}
	used := false
	s, err := rt.Open(h.id, m, func() (history.Log, []*messages.Entry, error) {
		used = true
		return log, entries, nil
	})
	if err != nil {
		if !used {
			_ = log.Close()
		}
		if errors.Is(err, musepi.ErrRuntimeClosed) {
			return nil
		}
		return &protocol.SessionOpened{Error: err.Error()}
	}
	h.s, h.log = s, log
	if s.Busy() { // its prompt resumed from the record: keep its events for the caller
		b := newEventBacklog(h.relay)
		b.unsubscribe = s.Subscribe(b.add)
		h.backlog = b
	}
	return &protocol.SessionOpened{State: s.StateWire()}
}

// notHere reports whether an open failed for a reason of this node's or
// of the moment, not of the session: the node was dropped, the database is
// out of its reach (or slow), or a live holder keeps the session. The
// handle then looks the session up again (and may find it placed
// elsewhere) rather than take the failure for the prompt's.
func notHere(err error) bool {
	return errors.Is(err, history.ErrTaken) || errors.Is(err, history.ErrLocked) ||
		errors.Is(err, context.DeadlineExceeded) || pgstore.Transient(err)
}

// openHistory opens the session's history from the shared store, taking
// a new epoch. While a live node holds it (a session handing over, or one
// whose node was cut off and whose lease has not run out) it tries again
// every 50 ms, never taking the session over a live lease: a holder that
// cannot renew its lease stops acting and, once its lease has lapsed by
// the database's clock, the open goes through. It gives up after the
// handover timeout and a lease more (the holder lives: a handle looks the
// session up again later). A hold of this very node incarnation is taken
// over after the handover timeout: its earlier activation here is gone
// (protoactor runs one activation of an identity on a node), it left
// without closing the history. A node the cluster dropped opens nothing.
func (h *sessionHost) openHistory() (heldLog, []*messages.Entry, error) {
	store := h.node.cc.Store
	start := time.Now()
	for {
		select {
		case <-h.node.member.Dropped():
			return heldLog{}, nil, errDropped
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.node.cc.HandoverTimeout)
		log, entries, err := store.OpenContext(ctx, h.id)
		var locked *pgstore.LockedError
		if errors.As(err, &locked) && locked.Owner == store.Node() && time.Since(start) > h.node.cc.HandoverTimeout {
			h.node.rt.Log().Warn("taking the session over from an earlier activation on this node", slog.Any("error", err), slog.String("session", h.id))
			log, entries, err = store.Takeover(ctx, h.id)
		}
		cancel()
		switch {
		case err == nil:
			return heldLog{Log: log, member: h.node.member}, entries, nil
		case !errors.Is(err, history.ErrLocked):
			return heldLog{}, nil, err
		case time.Since(start) > h.node.cc.HandoverTimeout+store.Lease():
			return heldLog{}, nil, fmt.Errorf("%w; its holder's lease is live: not taking it over", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// heldLog is a hosted session's history in the cluster's store: it holds
// the session (history.Holder) while the node is sure of its membership
// and of its database lease; when not sure of its membership it asks the
// database; once the cluster has dropped the node, never.
type heldLog struct {
	*pgstore.Log
	member *Member
}

// errDropped is why a session of a node the cluster dropped does not act.
var errDropped = fmt.Errorf("this node was dropped from the cluster: its sessions are another node's to serve (%w)", history.ErrTaken)

// Taken reports whether the session is certainly no longer this
// activation's: the node was dropped, or the history found a newer epoch.
func (l heldLog) Taken() bool {
	select {
	case <-l.member.Dropped():
		return true
	default:
		return l.Log.Taken()
	}
}

// Hold tells whether the session is still this activation's before it
// acts for it (a provider call, just before each of its HTTP requests,
// and a tool run). A node not sure of its membership first waits (at most
// a request timeout) until it knows where it stands (Member.Settle): one
// resumed after a pause learns that the cluster dropped it, rather than
// re-claiming a session that another node is taking over. A dropped node
// holds nothing. Otherwise the database is asked every time, whatever the
// node believes of its leases (pgstore.Log.Fence; a node not sure of its
// membership renews its lease first, Verify): a request goes out only
// under a fresh fence, at the cost of one query.
func (l heldLog) Hold(ctx context.Context) error {
	if !l.member.Sure() {
		settle, cancel := context.WithTimeout(ctx, l.member.RequestTimeout())
		l.member.Settle(settle)
		cancel()
	}
	select {
	case <-l.member.Dropped():
		return &history.Error{Op: "hold", Path: l.Session(), Err: errDropped}
	default:
	}
	if l.member.Sure() {
		return l.Log.Fence(ctx)
	}
	return l.Log.Verify(ctx)
}

// relay sends ev to a handle's relay, unless this activation has lost the
// session (heldLog.Taken): the handle follows the session's new activation
// by now, and a stale one's events would reach it among the new one's.
func (h *sessionHost) relay(pid *actor.PID, ev *messages.SessionEvent) {
	if h.log.Taken() {
		return
	}
	h.node.rt.System().Root.Send(pid, ev)
}

// watch registers a handle's relay, relaying the session's events to it
// when events is set.
func (h *sessionHost) watch(addr, id string, events bool) {
	if addr == "" || h.s == nil {
		return
	}
	key := addr + "/" + id
	w := h.watchers[key]
	if w == nil {
		w = &watcher{pid: actor.NewPID(addr, id)}
		h.watchers[key] = w
	}
	switch {
	case events && w.unsubscribe == nil && h.backlog != nil:
		w.unsubscribe = h.backlog.relayTo(key, w.pid)
	case events && w.unsubscribe == nil:
		w.unsubscribe = h.s.Subscribe(func(ev *messages.SessionEvent) { h.relay(w.pid, ev) })
	case !events && w.unsubscribe != nil:
		w.unsubscribe()
		w.unsubscribe = nil
	}
}

func (h *sessionHost) unwatchAll() {
	for key := range h.watchers {
		h.unwatch(key)
	}
	if h.backlog != nil {
		h.backlog.unsubscribe()
		h.backlog = nil
	}
}

func (h *sessionHost) unwatch(key string) {
	if w := h.watchers[key]; w != nil && w.unsubscribe != nil {
		w.unsubscribe()
	}
	delete(h.watchers, key)
}

// memberLeft tells an activation that the member at addr left the
// cluster: its handles are gone with it.
type memberLeft struct{ addr string }

// handover hands the session over as the activation stops (see
// Session.HandOver: once at rest, its record written, a prompt waiting in
// a backoff answered "handed over", which its handle takes to attach to
// the new activation); the handles are told once it has stopped. A session
// that does not come to rest within the handover timeout is closed as on
// one machine.
func (h *sessionHost) handover() {
	if s := h.s; s != nil {
		h.s = nil
		hctx, cancel := h.node.handoverContext()
		if h.log.Taken() {
			// Another activation has the session: nothing to hand over.
			// Its actor stops without ending the chain (and may have
			// stopped already, when it found this out first).
			err := s.CloseHere(hctx)
			cancel()
			if err != nil {
				h.node.rt.Log().Warn("stop a session another node has taken", slog.Any("error", err), slog.String("session", h.id))
			}
			return
		}
		err := s.HandOver(hctx)
		if err == nil {
			// The events of the turn that ended before the hand-over
			// (agent_settled among them) go to the handles before the
			// node can leave.
			_ = s.Flush(hctx)
		}
		cancel()
		if err != nil {
			h.node.rt.Log().Warn("hand the session over; closing it", slog.Any("error", err), slog.String("session", h.id))
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if err := s.Close(cctx); err != nil {
				h.node.rt.Log().Warn("close session", slog.Any("error", err), slog.String("session", h.id))
			}
			cancel()
		}
	}
}

// moved tells the handles that the activation is gone (SessionMoved).
func (h *sessionHost) moved(ctx actor.Context) {
	for _, w := range h.watchers {
		if h.node.isMember(w.pid.GetAddress()) { // a node that left would only be dialled in vain
			ctx.RequestWithCustomSender(w.pid, &protocol.SessionMoved{}, ctx.Self())
		}
	}
	h.unwatchAll()
}
