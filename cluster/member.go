package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	protocluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/internal/loglevel"
)

// Member is one node of a MusePi cluster: a protoactor cluster member that
// hosts activations of the credentials and fallback kinds, a router per
// provider and role for its own sessions, and views that mirror every
// activation's blocks.
type Member struct {
	cfg     Config
	log     *slog.Logger // protoactor's, at Warn and above
	own     *slog.Logger // the member's own lines: Config.Logger
	system  *actor.ActorSystem
	cluster *protocluster.Cluster

	views    *views
	resolver *Resolver

	credentials map[string]*actor.PID // router by provider
	fallbacks   map[string]*actor.PID // router by role

	closeOnce  sync.Once
	closeExtra func()

	// born is when the member started (the origin of sinceStart);
	// gone is closed, once, when the membership dropped this node.
	born     time.Time
	gone     chan struct{}
	dropOnce sync.Once
	// sureUntil, set by a membership with leases (etcd), is until when
	// (sinceStart) the node is certainly still a member; leftGracefully,
	// set by a membership that can tell, reports whether the member that
	// left said it was leaving.
	sureUntil      func() time.Duration
	settled        func() bool            // see Settle
	newsCh         func() <-chan struct{} // closed when the next keep-alive ends
	leftGracefully func(id string) bool
	deregister     func() error // removes the node's registration (nil: the membership cannot)

	// The members' addresses, from the last topology event: protoactor's
	// MemberList.Members is not safe to read while the topology changes.
	mu      sync.Mutex
	members []string
	ids     map[string][]string // the members' ids by address
}

// Start starts a node and joins the cluster: it returns once the node is a
// member, has started the actor that applies other nodes' changes to its
// views, and has started its
// routers. protoactor's own start takes about a second.
func Start(cfg Config) (m *Member, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m = newMember(cfg)
	provider, closeExtra, err := cfg.Membership.start(m)
	if err != nil {
		m.system.Shutdown()
		return nil, err
	}
	m.closeExtra = closeExtra
	m.cluster = protocluster.New(m.system, m.clusterConfig(provider))
	m.system.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*protocluster.ClusterTopology); ok {
			m.setTopology(t)
		}
	})
	if err := m.startMember(); err != nil {
		closeExtra()
		return nil, err
	}
	m.resolver = NewResolver(m.cluster)
	if _, err := m.system.Root.SpawnNamed(actor.PropsFromFunc(m.views.receive), viewsName); err != nil {
		_ = m.Leave()
		return nil, fmt.Errorf("cluster: views actor: %w", err)
	}
	if err := m.startRouters(); err != nil {
		_ = m.Leave()
		return nil, err
	}
	return m, nil
}

// newMember is the member cfg describes, with its loggers and its actor
// system, before it joins the cluster.
func newMember(cfg Config) *Member {
	h := slog.Handler(slog.DiscardHandler)
	if cfg.Logger != nil {
		h = cfg.Logger.Handler()
	}
	logger := slog.New(loglevel.AtLeast(loglevel.Demoted(h, slog.LevelDebug, connectionChurn...), slog.LevelWarn)).With("lib", "protoactor")
	m := &Member{cfg: cfg, log: logger, own: slog.New(h), views: newViews(cfg), born: time.Now(), gone: make(chan struct{}),
		credentials: map[string]*actor.PID{}, fallbacks: map[string]*actor.PID{}}
	m.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }))
	return m
}

// clusterConfig is protoactor's configuration of the member, which finds
// the others through provider.
func (m *Member) clusterConfig(provider protocluster.ClusterProvider) *protocluster.Config {
	remoteOpts := append(m.cfg.remoteSecurity(), connectOnce)
	if m.cfg.AdvertiseHost != "" {
		remoteOpts = append(remoteOpts, remote.WithAdvertisedHost(m.cfg.AdvertiseHost))
		provider = advertised{provider}
	}
	return protocluster.Configure(m.cfg.Name, provider, disthash.New(), remote.Configure(m.cfg.Host, m.cfg.Port, remoteOpts...),
		protocluster.WithKinds(m.kinds()...))
}

// connectOnce makes protoactor's endpoint writer try once to connect to a
// member, instead of MaxRetryCount times (5). Each try dials a new
// grpc.ClientConn and keeps the last one only: the writer closes that one
// when it stops, and the others are never closed and redial the address
// for the life of the process (remote/endpoint_writer.go, initialize).
// Any message for a member that has just left (a gossip reply, an answer
// to a request in flight) opens such an endpoint: 4 connections leaked per
// survivor and message, each with 4 goroutines. With one try, the writer
// gives up after 2 s instead of 10 (protoactor sleeps 2 s after a failed
// try) and closes the connection it dialled; the next message for the
// address opens a new endpoint.
func connectOnce(c *remote.Config) { c.MaxRetryCount = 1 }

// setTopology keeps the members' addresses and ids of a topology event,
// and logs the change.
func (m *Member) setTopology(t *protocluster.ClusterTopology) {
	addrs := make([]string, 0, len(t.GetMembers()))
	ids := make(map[string][]string, len(t.GetMembers()))
	for _, mem := range t.GetMembers() {
		addrs = append(addrs, mem.Address())
		ids[mem.Address()] = append(ids[mem.Address()], mem.GetId())
	}
	m.mu.Lock()
	m.members, m.ids = addrs, ids
	m.mu.Unlock()
	m.logTopology(t)
}

// connectionChurn are protoactor's lines about connections to members
// that come and go. It logs them at WARN and ERROR: several for every
// planned leave, about twenty per survivor when a node is lost. They are
// demoted to DEBUG; the member logs each change of the member list once
// instead (logTopology).
var connectionChurn = []string{
	"EndpointWriter lost connection",
	"EndpointWriter failed to connect",
	"EndpointWriter failed to create receive stream",
	"EndpointWriter failed to send connect request",
	"EndpointWriter failed to receive connect response",
	"EndpointWriter error when closing the client conn",
	"EndpointWriter error when closing the stream",
	"EndpointReader failed to send disconnection message",
	"sendGossipForMember failed",
	"Got gossip request from unknown member",
	"Gossip could not send gossip request",
}

// logTopology logs a change of the member list once: a member that
// joined, or left saying so, at INFO; one lost (it left without a word:
// killed, paused, cut off) at WARN.
func (m *Member) logTopology(t *protocluster.ClusterTopology) {
	for _, j := range t.GetJoined() {
		m.own.Info("member joined", slog.String("member", j.Address()))
	}
	for _, l := range t.GetLeft() {
		if m.leftGracefully != nil && m.leftGracefully(l.GetId()) {
			m.own.Info("member left", slog.String("member", l.Address()))
			continue
		}
		m.own.Warn("member lost: it left the membership without leaving (killed, paused or cut off)", slog.String("member", l.Address()))
	}
}

// shutdown runs protoactor's graceful Shutdown. Its last step, the remote's
// graceful stop, can panic (a send on an endpoint reader's channel that the
// reader closed as its stream ended, remote/endpoint_manager.go); everything
// else is done by then, so the gRPC server is stopped at once instead.
func (m *Member) shutdown() {
	defer func() {
		if r := recover(); r != nil {
			m.log.Warn("protoactor's remote shutdown panicked; stopping the gRPC server at once", slog.Any("panic", r))
			m.cluster.Remote.Shutdown(false)
		}
	}()
	if m.cfg.Client {
		m.clientShutdown()
		return
	}
	m.cluster.Shutdown(true)
}

// clientShutdown is protoactor's Shutdown for a client. A client hosts
// nothing whose ownership could move, so it skips the graceful path's
// fixed 2 s wait for that (its membership still removes it at once: see
// Membership's close). protoactor's other path, Shutdown(false), kills
// the gRPC server but leaves the remote's endpoints running: the client's
// connections to the members would stay open while they live. So these
// are Shutdown(false)'s steps with the remote's graceful stop, which stops
// the endpoints (closing their connections) and then the server.
func (m *Member) clientShutdown() {
	m.cluster.Gossip.SetState(protocluster.GracefullyLeftKey, &emptypb.Empty{})
	m.system.Shutdown()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		m.cluster.Remote.Shutdown(true)
	}()
	select {
	case <-stopped:
	case <-time.After(clientStopWait):
		// The endpoints to a frozen or cut-off member wait on their
		// streams (protoactor then waits 10 s more for the gRPC server):
		// the server is killed, and the endpoints end with the process or
		// their connections.
		m.log.Warn("the remote's endpoints did not stop in time (a member does not answer); stopping the gRPC server at once",
			slog.Duration("waited", clientStopWait))
		m.cluster.Remote.Shutdown(false)
	}
}

// clientStopWait bounds a client's graceful stop of its remote: a client
// of a frozen host once took 25 s to exit, twice its close timeout.
const clientStopWait = 3 * time.Second

// startMember runs protoactor's StartMember, which panics on errors. Its
// remote panics first of all when it cannot listen (a port in use), before
// its gRPC server exists: the server is stopped only if the remote got as
// far as setting the system's address, after it listened.
func (m *Member) startMember() (err error) {
	unset := m.system.Address()
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if rerr, ok := r.(error); ok {
			err = fmt.Errorf("cluster: starting member %q: %w", m.cfg.Name, rerr)
		} else {
			err = fmt.Errorf("cluster: starting member %q: %v", m.cfg.Name, r)
		}
		m.system.Shutdown()
		if m.system.Address() != unset {
			m.cluster.Remote.Shutdown(false)
		}
	}()
	m.cluster.StartMember()
	return nil
}

func (m *Member) startRouters() error {
	for _, p := range m.cfg.Providers {
		r := m.newRouter(CredentialsKind, p.Name)
		r.view = m.views.creds[p.Name]
		r.overload, r.members = p.Overload, func() int { return len(m.Members()) }
		for _, c := range p.Credentials {
			r.creds = append(r.creds, c.Name)
		}
		pid, err := m.system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return r }), "musepi-credentials-"+p.Name)
		if err != nil {
			return fmt.Errorf("cluster: router of provider %q: %w", p.Name, err)
		}
		m.credentials[p.Name] = pid
	}
	for role := range m.cfg.FallbackChains {
		r := m.newRouter(FallbackKind, role)
		pid, err := m.system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return r }), "musepi-fallback-"+role)
		if err != nil {
			return fmt.Errorf("cluster: router of role %q: %w", role, err)
		}
		m.fallbacks[role] = pid
	}
	return nil
}

func (m *Member) newRouter(kind, identity string) *router {
	return &router{kind: kind, identity: identity, res: m.resolver, timeout: m.cfg.RequestTimeout,
		attempts: m.cfg.RequestAttempts, log: m.log}
}

// Wire puts the node's routers and views into d, where a single-machine
// runtime puts its own credentials and fallback actors: Credentials and
// Keys for providers with credentials (Credentials alone for one with the
// node's overload limiter and no credentials), Budgets for providers with
// a budget, Views, Fallbacks. Sessions spawned on System() with d then use
// the cluster-wide actors.
func (m *Member) Wire(d *actors.Deps) {
	for _, p := range m.cfg.Providers {
		pid := m.credentials[p.Name]
		if d.Views == nil {
			d.Views = map[string]*actors.CredentialsView{}
		}
		d.Views[p.Name] = m.views.creds[p.Name]
		if p.Budget.Enabled {
			if d.Budgets == nil {
				d.Budgets = map[string]*actor.PID{}
			}
			d.Budgets[p.Name] = pid
		}
		if len(p.Credentials) == 0 && p.Overload == nil {
			continue
		}
		if d.Credentials == nil {
			d.Credentials = map[string]*actor.PID{}
		}
		d.Credentials[p.Name] = pid
		if len(p.Credentials) == 0 {
			continue // the node's limiter alone: its turns ask it for their places, and go with the provider's key
		}
		if d.Keys == nil {
			d.Keys = map[string]map[string]string{}
		}
		keys := map[string]string{}
		for _, c := range p.Credentials {
			keys[c.Name] = c.APIKey
		}
		d.Keys[p.Name] = keys
	}
	for role, pid := range m.fallbacks {
		if d.Fallbacks == nil {
			d.Fallbacks = map[string]*actor.PID{}
		}
		d.Fallbacks[role] = pid
	}
}

// System is the node's actor system, where its sessions run.
func (m *Member) System() *actor.ActorSystem { return m.system }

// Cluster is the node's protoactor cluster member.
func (m *Member) Cluster() *protocluster.Cluster { return m.cluster }

// Members are the addresses of the cluster's members, this one included,
// as of the last topology change this node saw.
func (m *Member) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

// Incarnations are the ids of the members at addr (host:port), as of the
// last topology change this node saw: more than one while a member that
// came back on its address is still listed beside its old self.
func (m *Member) Incarnations(addr string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ids[addr])
}

// Listed reports whether any of ids is a member's id, as of the last
// topology change this node saw.
func (m *Member) Listed(ids []string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, same := range m.ids {
		for _, id := range same {
			if slices.Contains(ids, id) {
				return true
			}
		}
	}
	return false
}

// Address is the node's remote address (host:port).
func (m *Member) Address() string { return m.system.Address() }

// Credentials is the node's router to the credentials kind of provider
// (nil: not configured).
func (m *Member) Credentials(provider string) *actor.PID { return m.credentials[provider] }

// Fallback is the node's router to the fallback kind of role (nil: not
// configured).
func (m *Member) Fallback(role string) *actor.PID { return m.fallbacks[role] }

// CredentialsView is the node's view of provider's credentials.
func (m *Member) CredentialsView(provider string) *actors.CredentialsView {
	return m.views.creds[provider]
}

// CooldownView is the node's view of role's model cooldowns.
func (m *Member) CooldownView(role string) *actors.CooldownView { return m.views.cooldowns[role] }

// Propagation is how long the changes published so far took to reach this
// node's views.
func (m *Member) Propagation() Propagation { return m.views.lag.stats() }

// RequestTimeout is Config.RequestTimeout (with its default).
func (m *Member) RequestTimeout() time.Duration { return m.cfg.RequestTimeout }

// Resolver is the node's identity resolver.
func (m *Member) Resolver() *Resolver { return m.resolver }

// sinceStart is the time since the member started, by the monotonic
// clock.
func (m *Member) sinceStart() time.Duration { return time.Since(m.born) }

// dropped is how the membership tells the node that the others dropped it
// (why says how it knows): it logs one line and closes Dropped.
// protoactor blocks a dropped member's id for good, so the node cannot
// come back as itself: it has to leave and join anew (Dropped).
func (m *Member) dropped(why string) {
	m.dropOnce.Do(func() {
		m.own.Warn("this node was dropped from the cluster: "+why+"; it stops acting for its sessions and must leave and join again",
			slog.String("address", m.Address()))
		close(m.gone)
	})
}

// stepAside takes the node out of the cluster by its own decision (why
// says why): it is dropped (Dropped), and a membership that can (etcd)
// removes its registration at once, so that the others stop placing
// activations on it; like a node the others dropped, it must leave and
// join anew.
func (m *Member) stepAside(why string) {
	m.dropped(why)
	if m.deregister != nil {
		go func() {
			if err := m.deregister(); err != nil {
				m.own.Warn("step aside from the cluster", slog.Any("error", err))
			}
		}()
	}
}

// Dropped is closed once the cluster has dropped this node: its process
// was paused, or cut off from the membership service, for longer than its
// lease there, so the others removed it, took or will take its sessions
// over, and will refuse it as a member from now on. The node must then
// leave (Leave) and join anew as a new member. The node's sessions stop
// acting meanwhile (Sure).
func (m *Member) Dropped() <-chan struct{} { return m.gone }

// Sure reports whether the node is certainly still a member: not dropped,
// and with a membership that has leases (etcd), its lease renewed recently
// enough that it cannot have run out. Before a session acts for its
// conversation (a provider call, a tool run) on a node that is not sure,
// its history's holder checks with the database that the session is still
// its own.
func (m *Member) Sure() bool {
	select {
	case <-m.gone:
		return false
	default:
	}
	return m.sureUntil == nil || m.sinceStart() < m.sureUntil()
}

// Settle waits, while the node is not sure of its membership, until it
// knows where it stands or ctx ends: sure again, dropped, or with etcd out
// of reach (then the database decides, as it does for a node that is not
// sure). A node resumed after a pause longer than its lease in etcd so
// learns that it was dropped, from its first keep-alive, before it acts
// for a session that another node may be taking over at that moment.
func (m *Member) Settle(ctx context.Context) {
	if m.settled == nil {
		return
	}
	for {
		news := m.newsCh() // before the checks: a keep-alive ending after them closes it
		if m.Sure() || m.settled() {
			return
		}
		select {
		case <-m.gone:
			return
		case <-ctx.Done():
			return
		case <-news:
		}
	}
}

// ErrLeft is returned by Leave when the node had already left.
var ErrLeft = errors.New("cluster: member already left")

// Leave leaves the cluster gracefully: the membership provider removes the
// node, the activations it hosted stop (their next callers activate them
// on another node), and the node shuts down. protoactor waits 2 s for
// ownership to move.
func (m *Member) Leave() error {
	err := ErrLeft
	m.closeOnce.Do(func() {
		err = nil
		start := time.Now()
		m.shutdown()
		m.closeExtra()
		m.log.Debug("left the cluster", slog.Duration("took", time.Since(start)))
	})
	return err
}
