package musepi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/internal/hosting"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/retry"
)

// ErrHostLeft is what a prompt fails with when the node hosting its
// session left while the prompt ran, and the session's new activation
// could not carry it on (it had no record of it: the node died before the
// prompt was taken, or in a turn before any backoff).
var ErrHostLeft = errors.New("musepi: the node hosting the session left during the prompt")

// NewHostedRuntime is for package cluster (cluster.Join, which embedders
// call instead): a runtime of opts on store, for a node of a cluster, and
// the same runtime as the node drives it (through hosting.Runtime, so that
// this package links no cluster code). It runs on the wall clock
// (WithClock is refused); its actors start at Attach.
func NewHostedRuntime(store history.Store, opts ...Option) (*Runtime, hosting.Runtime[*Session], error) {
	rt, err := newRuntime(append(slices.Clip(opts), WithHistoryStore(store)))
	if err != nil {
		return nil, nil, err
	}
	if _, ok := rt.cfg.clock.(clock.Real); !ok {
		return nil, nil, fmt.Errorf("musepi: join a cluster: WithClock: cluster mode runs on the wall clock")
	}
	return rt, nodeRuntime{rt}, nil
}

// HostedNode is for package cluster (cluster.MemberOf): the node of a
// runtime of NewHostedRuntime once attached, nil for any other runtime.
func HostedNode(rt *Runtime) hosting.Node[*Session] {
	if rt == nil {
		return nil
	}
	return rt.cluster
}

// nodeRuntime is a runtime as its cluster node drives it.
type nodeRuntime struct{ rt *Runtime }

// System is the runtime's actor system (the member's, once attached).
func (n nodeRuntime) System() *actor.ActorSystem { return n.rt.system }

// Log is the runtime's logger.
func (n nodeRuntime) Log() *slog.Logger { return n.rt.cfg.log }

// Closed reports whether the runtime was shut down.
func (n nodeRuntime) Closed() bool {
	n.rt.mu.Lock()
	defer n.rt.mu.Unlock()
	return n.rt.closed
}

// AllEvents are the runtime's subscribers to every session's events.
func (n nodeRuntime) AllEvents() *actors.Fanout { return n.rt.allEvents }

// Settings are the runtime's providers, credentials, budget and fallback
// chains as the cluster's shared actors' settings.
func (n nodeRuntime) Settings() hosting.Settings {
	cfg := n.rt.cfg
	out := hosting.Settings{Log: cfg.log, FallbackChains: cfg.settings.FallbackChains}
	for _, name := range n.rt.providerNames() {
		creds := cfg.creds[name]
		if len(creds) == 0 && !cfg.settings.Budget.Enabled && cfg.overload == nil {
			continue
		}
		p := hosting.Provider{Name: name, Credentials: cfg.actorCredentials(name), AutoRedeem: cfg.autoRedeem, Pacing: cfg.pacing,
			Refunds: cfg.refunds(name), StickyWait: cfg.stickyWait, Overload: cfg.overload}
		if cfg.settings.Budget.Enabled {
			p.Budget = cfg.settings.Budget
		}
		out.Providers = append(out.Providers, p)
	}
	return out
}

// Attach runs the runtime on node's member m: its sessions use the
// cluster's shared actors, and its stats read their views.
func (n nodeRuntime) Attach(node hosting.Node[*Session], m hosting.Member) {
	rt := n.rt
	rt.cluster = node
	rt.system = m.System()
	rt.start(func(deps *actors.Deps, _ actor.PropsOption) {
		m.Wire(deps)
		for name, v := range deps.Views {
			rt.credViews[name] = v
		}
		for role := range rt.cfg.settings.FallbackChains {
			if v := m.CooldownView(role); v != nil {
				rt.cooldownViews = append(rt.cooldownViews, v)
			}
		}
	})
}

// Serve starts the runtime's telemetry, and unless client its durable
// timers: a due session claimed here opens wherever the cluster places
// it.
func (n nodeRuntime) Serve(client bool) error {
	if err := n.rt.startTelemetry(); err != nil {
		_ = n.rt.Shutdown(context.Background())
		return fmt.Errorf("musepi: %w", err)
	}
	if !client {
		n.rt.startTimers()
	}
	return nil
}

// NewHandle is a Session of id that runs through r.
func (n nodeRuntime) NewHandle(id, model string, autoRetry bool, r hosting.Runner) hosting.Handle[*Session] {
	s := &Session{id: id, rt: n.rt, state: &actors.SessionState{}, at: r}
	s.events.Init(n.rt.sessionEvents)
	s.state.Init(model, autoRetry)
	return sessionHandle{s}
}

// Open hosts session id here, as req configures it, on the history open
// returns.
func (n nodeRuntime) Open(id string, req *protocol.SessionOpen, open func() (history.Log, []*messages.Entry, error)) (hosting.Local, error) {
	cfg := sessionConfig{id: id, model: req.GetModel(), role: req.GetRole(), priority: pacing.PriorityOf(req.GetPriority())}
	if req.GetSettings() != nil {
		settings, err := retry.SettingsFromProto(req.GetSettings())
		if err != nil {
			return nil, err
		}
		cfg.settings = &settings
	}
	settings, err := n.rt.checkSession(cfg)
	if err != nil {
		return nil, err
	}
	s, err := n.rt.openLocal(cfg, settings, open)
	if err != nil {
		return nil, err
	}
	return hostedSession{s}, nil
}

// sessionHandle is a Session as its cluster runner uses it.
type sessionHandle struct{ s *Session }

func (h sessionHandle) ID() string                        { return h.s.id }
func (h sessionHandle) Session() *Session                 { return h.s }
func (h sessionHandle) Publish(ev *messages.SessionEvent) { h.s.events.Publish(ev) }
func (h sessionHandle) Listening() bool                   { return h.s.events.HasSubscribers() }
func (h sessionHandle) State() *actors.SessionState       { return h.s.state }
func (h sessionHandle) ClosedError() error                { return h.s.closedError() }
func (h sessionHandle) Send(msg hosting.Request)          { h.s.send(msg) }
func (h sessionHandle) Ask(ctx context.Context, msg hosting.Request) (any, error) {
	return h.s.ask(ctx, msg)
}

// hostedSession is a session this runtime hosts for the cluster.
type hostedSession struct{ s *Session }

func (h hostedSession) Deliver(send func(*actor.PID)) error { return h.s.deliver(send) }
func (h hostedSession) Subscribe(fn func(*messages.SessionEvent)) func() {
	return h.s.events.Subscribe(fn)
}
func (h hostedSession) Flush(ctx context.Context) error        { return h.s.events.Flush(ctx) }
func (h hostedSession) Busy() bool                             { return h.s.Busy() }
func (h hostedSession) StateWire() *protocol.SessionStateReply { return h.s.state.Wire() }
func (h hostedSession) HandOver(ctx context.Context) error     { return h.s.HandOver(ctx) }
func (h hostedSession) Close(ctx context.Context) error        { return h.s.Close(ctx) }
func (h hostedSession) CloseHere(ctx context.Context) error    { return h.s.local.CloseHere(ctx) }

// ClusterDropped is closed once the cluster has dropped this node (see
// package cluster's Member.Dropped): its process was paused, or cut off
// from the membership service, past its lease there. Its sessions stop
// acting; the runtime must be shut down, and a new one join in its place.
// nil (never ready) for a runtime of NewRuntime.
func (rt *Runtime) ClusterDropped() <-chan struct{} {
	if rt.cluster == nil {
		return nil
	}
	return rt.cluster.Member().Dropped()
}

// ClusterMembers are the addresses of the cluster's members as this node
// last saw them, itself included (nil: not a runtime of cluster.Join).
func (rt *Runtime) ClusterMembers() []string {
	if rt.cluster == nil {
		return nil
	}
	return rt.cluster.Member().Members()
}
