package musepi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/hosting"
	"github.com/musepi/musepi/retry"
)

// ErrHostLeft is what a prompt fails with when the node hosting its
// session left while the prompt ran, and the session's new activation
// could not carry it on (it had no record of it: the node died before the
// prompt was taken, or in a turn before any backoff).
var ErrHostLeft = errors.New("musepi: the node hosting the session left during the prompt")

func init() {
	hosting.Join = func(ctx context.Context, cfg hosting.Config, opts any) (any, error) {
		return joinCluster(ctx, cfg, opts.([]Option))
	}
	hosting.MemberOf = func(rt any) hosting.Member {
		if r, ok := rt.(*Runtime); ok && r != nil && r.cluster != nil {
			return r.cluster.member
		}
		return nil
	}
}

// joinCluster starts a runtime that is a node of a cluster (package
// cluster's Join): it hosts the sessions the cluster places on it, and
// the shared credentials and fallback actors (unless cfg.Client). opts
// are NewRuntime's; the providers, credentials, fallback chains and retry
// budget they set configure the shared actors. Its NewSession reaches a
// session wherever it is hosted. Cluster mode runs on the wall clock:
// WithClock is refused.
//
// ctx bounds the start: the member's start takes no context, so a ctx
// that ends during it makes the node leave again once it is done, and
// joinCluster fails with ctx's error.
func joinCluster(ctx context.Context, cfg hosting.Config, opts []Option) (*Runtime, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rt, err := newRuntime(append(opts, WithHistoryStore(cfg.Store)))
	if err != nil {
		return nil, err
	}
	if _, ok := rt.cfg.clock.(clock.Real); !ok {
		return nil, fmt.Errorf("musepi: join a cluster: WithClock: cluster mode runs on the wall clock")
	}
	node := &clusterNode{rt: rt, cc: cfg, ready: make(chan struct{}), handles: map[string]*remoteSession{}, hosts: map[string]*actor.PID{}}
	rt.cluster = node
	var sessions *actor.Props
	if !cfg.Client {
		sessions = actor.PropsFromProducer(func() actor.Actor { return &sessionHost{node: node} })
	}
	m, err := cfg.Start(rt.clusterSettings(), sessions)
	if err != nil {
		return nil, fmt.Errorf("musepi: join a cluster: %w", err)
	}
	if err := ctx.Err(); err != nil { // the member's start takes no context
		return nil, fmt.Errorf("musepi: join a cluster: %w", errors.Join(err, m.Leave()))
	}
	node.start(m)
	close(node.ready)
	node.auditPrompts()
	if err := rt.startTelemetry(); err != nil {
		_ = rt.Shutdown(context.Background())
		return nil, fmt.Errorf("musepi: %w", err)
	}
	if !cfg.Client {
		rt.startTimers() // a due session claimed here opens wherever the cluster places it
	}
	return rt, nil
}

// start runs the node's runtime on member m: its sessions use the
// cluster's shared actors, its stats read their views, and the handles
// hear of the members that leave.
func (node *clusterNode) start(m hosting.Member) {
	rt := node.rt
	node.member = m
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
	m.OnLeft(func(addr string) {
		go node.left(addr) // the handles may be opening a session: not on the event stream
	})
}

// clusterSettings are the runtime's providers, credentials, budget and
// fallback chains as the cluster's shared actors' settings.
func (rt *Runtime) clusterSettings() hosting.Settings {
	cfg := rt.cfg
	out := hosting.Settings{Log: cfg.log, FallbackChains: cfg.settings.FallbackChains}
	for _, name := range rt.providerNames() {
		creds := cfg.creds[name]
		if len(creds) == 0 && !cfg.settings.Budget.Enabled {
			continue
		}
		p := hosting.Provider{Name: name, Credentials: actorCredentials(creds), AutoRedeem: cfg.autoRedeem}
		if cfg.settings.Budget.Enabled {
			p.Budget = cfg.settings.Budget
		}
		out.Providers = append(out.Providers, p)
	}
	return out
}

// clusterNode is a runtime's part in a cluster: its member, and the
// handles of the sessions opened through it (which may be hosted
// anywhere; the sessions it hosts are the runtime's sessions).
type clusterNode struct {
	rt     *Runtime
	cc     hosting.Config
	member hosting.Member
	ready  chan struct{} // closed once the runtime can host sessions

	mu      sync.Mutex
	handles map[string]*remoteSession
	hosts   map[string]*actor.PID // the session kind's activations here, by session id
	leaving context.Context       // Shutdown's, while the node leaves
	audit   *time.Timer           // the next auditPrompts
	stopped bool
}

// auditEvery is how often a node checks its handles' waiting prompts
// against the member list (see remoteSession.audit).
const auditEvery = time.Second

// auditPrompts carries on the prompts whose activation's member left
// (remoteSession.audit), then runs again in auditEvery until shutdown.
func (n *clusterNode) auditPrompts() {
	now, grace := time.Now(), n.leftGrace()
	for _, r := range n.remotes() {
		r.audit(now, grace, n.member.Listed)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.stopped {
		n.audit = time.AfterFunc(auditEvery, n.auditPrompts)
	}
}

// leftGrace is how long a handle waits for the answers of an activation
// whose member left: a node that leaves gracefully hands its sessions
// over within the handover timeout, and its answers take a request
// timeout more.
func (n *clusterNode) leftGrace() time.Duration {
	return n.cc.HandoverTimeout + n.member.RequestTimeout()
}

// handle returns the runtime's handle of session cfg.id, opening the
// session at its activation.
func (n *clusterNode) handle(ctx context.Context, cfg sessionConfig, settings retry.Settings) (*Session, error) {
	if cfg.steering != nil {
		return nil, fmt.Errorf("musepi: session %s: WithSteering: a Go function cannot reach the node that hosts the session in cluster mode", cfg.id)
	}
	if cfg.open != nil {
		return nil, fmt.Errorf("musepi: session %s: WithTakeover: in cluster mode the hosting node opens the history (and takes it over after ClusterConfig.HandoverTimeout)", cfg.id)
	}
	n.rt.mu.Lock()
	closed := n.rt.closed
	n.rt.mu.Unlock()
	if closed {
		return nil, ErrRuntimeClosed
	}
	n.mu.Lock()
	if _, dup := n.handles[cfg.id]; dup {
		n.mu.Unlock()
		return nil, fmt.Errorf("musepi: session %q is already open on this node", cfg.id)
	}
	r := newHandle(n, cfg, settings)
	n.handles[cfg.id] = r
	n.mu.Unlock()
	if err := r.connect(ctx); err != nil {
		n.forget(r)
		r.release()
		return nil, err
	}
	return r.s, nil
}

// letGo drops the handle r, leaving its session open at its activation.
func (n *clusterNode) letGo(r *remoteSession) {
	r.release()
	n.forget(r)
}

// letGoOf drops the handle of session id, if it is open here.
func (n *clusterNode) letGoOf(id string) {
	n.mu.Lock()
	r := n.handles[id]
	n.mu.Unlock()
	if r != nil {
		n.letGo(r)
	}
}

// forget drops the handle r from the node's handles.
func (n *clusterNode) forget(r *remoteSession) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.handles[r.s.id] == r {
		delete(n.handles, r.s.id)
	}
}

// remotes are the node's handles.
func (n *clusterNode) remotes() []*remoteSession {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*remoteSession, 0, len(n.handles))
	for _, r := range n.handles {
		out = append(out, r)
	}
	return out
}

// watch has the handles' activations relay events if anyone listens.
func (n *clusterNode) watch() {
	for _, r := range n.remotes() {
		r.watch()
	}
}

// left tells the handles whose session was hosted at addr that its node
// left the cluster, and the activations here to drop the handles there.
func (n *clusterNode) left(addr string) {
	for _, r := range n.remotes() {
		r.hostLeft(addr)
	}
	n.mu.Lock()
	hosts := make([]*actor.PID, 0, len(n.hosts))
	for _, pid := range n.hosts {
		hosts = append(hosts, pid)
	}
	n.mu.Unlock()
	for _, pid := range hosts {
		n.rt.system.Root.Send(pid, memberLeft{addr})
	}
}

// hosted records the activation of session id.
func (n *clusterNode) hosted(id string, pid *actor.PID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hosts[id] = pid
}

// unhosted forgets the activation pid of session id.
func (n *clusterNode) unhosted(id string, pid *actor.PID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hosts[id].Equal(pid) {
		delete(n.hosts, id)
	}
}

// isMember reports whether addr is a member of the cluster now, this node
// included.
func (n *clusterNode) isMember(addr string) bool {
	return addr == n.rt.system.Address() || slices.Contains(n.member.Members(), addr)
}

// handoverContext bounds a session's handover: Shutdown's context while
// the node leaves, else HandoverTimeout.
func (n *clusterNode) handoverContext() (context.Context, context.CancelFunc) {
	n.mu.Lock()
	leaving := n.leaving
	n.mu.Unlock()
	if leaving != nil {
		return context.WithTimeout(leaving, n.cc.HandoverTimeout)
	}
	return context.WithTimeout(context.Background(), n.cc.HandoverTimeout)
}

// shutdown leaves the cluster: the handles let go of their sessions (a
// prompt waiting on one fails with ErrShutdown), the node leaves, and the
// sessions it hosts are handed over (see sessionHost).
func (n *clusterNode) shutdown(ctx context.Context) error {
	for _, r := range n.remotes() {
		n.letGo(r)
	}
	n.mu.Lock()
	n.leaving, n.stopped = ctx, true
	if n.audit != nil {
		n.audit.Stop()
	}
	n.mu.Unlock()
	if err := n.member.Leave(); err != nil {
		return fmt.Errorf("musepi: leave the cluster: %w", err)
	}
	return nil
}

// ClusterDropped is closed once the cluster has dropped this node (see
// package cluster's Member.Dropped): its process was paused, or cut off from the
// membership service, past its lease there. Its sessions stop acting; the
// runtime must be shut down, and a new one join in its place. nil (never
// ready) for a runtime of NewRuntime.
func (rt *Runtime) ClusterDropped() <-chan struct{} {
	if rt.cluster == nil {
		return nil
	}
	return rt.cluster.member.Dropped()
}

// ClusterMembers are the addresses of the cluster's members as this node
// last saw them, itself included (nil: not a runtime of cluster.Join).
func (rt *Runtime) ClusterMembers() []string {
	if rt.cluster == nil {
		return nil
	}
	return rt.cluster.member.Members()
}
