package musepi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	protocluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// sessionHost is the session kind's activation (identity: the session
// id). Opened by a handle's SessionOpen, it opens the session's history
// from the shared store (taking the session's epoch) and hosts the
// session here as the runtime's own Session, to whose actor it forwards
// the handles' messages with their senders, so replies go straight back
// to the handles. It relays the session's events to the handles that
// listen. When it stops (its node leaves, or the topology moves the
// session) it hands the session over: see Session.handover.
type sessionHost struct {
	node     *clusterNode
	id       string
	s        *Session
	watchers map[string]*watcher // by the watcher's address and id
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
	case *messages.SessionOpen:
		reply := h.open(m)
		switch {
		case reply == nil: // the node is leaving: the handle looks again
			ctx.Respond(&actor.DeadLetterResponse{Target: ctx.Self()})
			ctx.Stop(ctx.Self())
			return
		case reply.GetError() == "":
			h.watch(m.GetWatcherAddress(), m.GetWatcherId(), m.GetEvents())
		}
		ctx.Respond(reply)
	case *messages.SessionWatch:
		h.watch(m.GetWatcherAddress(), m.GetWatcherId(), m.GetEvents())
		ctx.Respond(&messages.Ack{})
	case *messages.SessionStateRequest:
		if h.s == nil {
			ctx.Respond(&actor.DeadLetterResponse{Target: ctx.Self()})
			break
		}
		ctx.Respond(h.s.state.Wire())
	case *messages.SessionOptions:
		if h.s != nil {
			if m.ThinkingLevel != nil {
				h.s.SetThinkingLevel(provider.ThinkingLevel(m.GetThinkingLevel()))
			}
			if m.AutoCompaction != nil {
				h.s.SetAutoCompaction(m.GetAutoCompaction())
			}
		}
	case *messages.SessionClose:
		if h.s != nil {
			cctx, cancel := context.WithTimeout(context.Background(), h.node.cc.HandoverTimeout)
			if err := h.s.Close(cctx); err != nil {
				h.node.rt.cfg.log.Warn().Err(err).Str("session", h.id).Msg("close session")
			}
			cancel()
			h.s = nil
		}
		h.unwatchAll()
		ctx.Respond(&messages.Ack{})
		ctx.Stop(ctx.Self())
	case *actor.Stopping:
		h.handover(ctx)
	case actor.SystemMessage, actor.AutoReceiveMessage:
	default:
		h.forward(ctx, m)
	}
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
	err := h.s.deliver(func(pid *actor.PID) {
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
// opens find it open). It returns nil when the node is leaving.
func (h *sessionHost) open(m *messages.SessionOpen) *messages.SessionOpened {
	if h.s != nil {
		return &messages.SessionOpened{}
	}
	<-h.node.ready
	rt := h.node.rt
	rt.mu.Lock()
	closed := rt.closed
	rt.mu.Unlock()
	if closed {
		return nil
	}
	cfg := sessionConfig{id: h.id, model: m.GetModel(), role: m.GetRole()}
	if m.GetSettings() != nil {
		settings, err := retry.SettingsFromProto(m.GetSettings())
		if err != nil {
			return &messages.SessionOpened{Error: err.Error()}
		}
		cfg.settings = &settings
	}
	settings, err := rt.checkSession(cfg)
	if err != nil {
		return &messages.SessionOpened{Error: err.Error()}
	}
	log, entries, err := h.openHistory()
	if err != nil {
		return &messages.SessionOpened{Error: fmt.Sprintf("open session %s: %v", h.id, err)}
	}
	used := false
	s, err := rt.openLocal(cfg, settings, func() (history.Log, []*messages.Entry, error) {
		used = true
		return log, entries, nil
	})
	if err != nil {
		if !used {
			_ = log.Close()
		}
		if errors.Is(err, ErrRuntimeClosed) {
			return nil
		}
		return &messages.SessionOpened{Error: err.Error()}
	}
	h.s = s
	return &messages.SessionOpened{}
}

// openHistory opens the session's history from the shared store, taking
// a new epoch. While another node holds it (a session handing over, or
// one whose node died and whose lease has not run out) it tries again;
// after the handover timeout it takes the session over: the identity
// lookup placed it here, so its holder has left the cluster or is stuck,
// and fencing keeps a stale holder from writing.
func (h *sessionHost) openHistory() (history.Log, []*messages.Entry, error) {
	store := h.node.cc.Store
	deadline := time.Now().Add(h.node.cc.HandoverTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), h.node.cc.HandoverTimeout)
		log, entries, err := store.OpenContext(ctx, h.id)
		if errors.Is(err, history.ErrLocked) && time.Now().After(deadline) {
			h.node.rt.cfg.log.Warn().Err(err).Str("session", h.id).Msg("taking the session over from its holder")
			log, entries, err = store.Takeover(ctx, h.id)
		}
		cancel()
		switch {
		case err == nil:
			return log, entries, nil
		case !errors.Is(err, history.ErrLocked):
			return nil, nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
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
	case events && w.unsubscribe == nil:
		root := h.node.rt.system.Root
		w.unsubscribe = h.s.events.Subscribe(func(ev *messages.SessionEvent) { root.Send(w.pid, ev) })
	case !events && w.unsubscribe != nil:
		w.unsubscribe()
		w.unsubscribe = nil
	}
}

func (h *sessionHost) unwatchAll() {
	for key, w := range h.watchers {
		if w.unsubscribe != nil {
			w.unsubscribe()
		}
		delete(h.watchers, key)
	}
}

// handover hands the session over as the activation stops, and tells the
// handles (SessionMoved, with the generation of a prompt it left waiting
// in a backoff).
func (h *sessionHost) handover(ctx actor.Context) {
	var orphaned uint64
	if h.s != nil {
		hctx, cancel := h.node.handoverContext()
		var err error
		orphaned, err = h.s.handover(hctx)
		cancel()
		if err != nil {
			h.node.rt.cfg.log.Warn().Err(err).Str("session", h.id).Msg("hand the session over")
		}
		h.s = nil
	}
	moved := &messages.SessionMoved{Orphaned: orphaned}
	for _, w := range h.watchers {
		ctx.RequestWithCustomSender(w.pid, moved, ctx.Self())
	}
	h.unwatchAll()
}

// handover stops a session hosted here for it to move to another node:
// once it is at rest (idle, or waiting out a backoff) its actor stops
// without settling its prompt and closes its history. It returns the
// generation of the prompt left waiting in a backoff (0: none). If it
// does not come to rest before ctx ends, it is closed as on one machine
// (its prompt ends with ErrShutdown).
func (s *Session) handover(ctx context.Context) (uint64, error) {
	defer s.rt.forget(s.id)
	for ctx.Err() == nil {
		res, err := s.ask(ctx, &messages.Handover{})
		if err != nil {
			break
		}
		if r, ok := res.(*messages.HandoverReply); ok && r.GetStopping() {
			s.start.Lock()
			s.closed = true
			pid := s.pid.Load()
			s.start.Unlock()
			if pid != nil {
				_ = waitFuture(ctx, s.rt.system.Root.StopFuture(pid))
			}
			return r.GetOrphaned(), nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return 0, s.Close(cctx)
}
