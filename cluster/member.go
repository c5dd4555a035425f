package cluster

import (
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

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/internal/zslog"
)

// Member is one node of a MusePi cluster: a protoactor cluster member that
// hosts activations of the credentials and fallback kinds, a router per
// provider and role for its own sessions, and views that mirror every
// activation's blocks.
type Member struct {
	cfg     Config
	log     *slog.Logger
	system  *actor.ActorSystem
	cluster *protocluster.Cluster

	views    *views
	resolver *Resolver

	credentials map[string]*actor.PID // router by provider
	fallbacks   map[string]*actor.PID // router by role

	closeOnce  sync.Once
	closeExtra func()

	// The members' addresses, from the last topology event: protoactor's
	// MemberList.Members is not safe to read while the topology changes.
	mu      sync.Mutex
	members []string
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
	h := slog.Handler(slog.DiscardHandler)
	if cfg.Logger != nil {
		h = cfg.Logger.Handler()
	}
	logger := slog.New(zslog.AtLeast(h, slog.LevelWarn)).With("lib", "protoactor")
	m = &Member{cfg: cfg, log: logger, views: newViews(cfg),
		credentials: map[string]*actor.PID{}, fallbacks: map[string]*actor.PID{}}
	m.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }))
	provider, closeExtra, err := cfg.Membership.start(m)
	if err != nil {
		m.system.Shutdown()
		return nil, err
	}
	m.closeExtra = closeExtra
	remoteOpts := cfg.remoteSecurity()
	if cfg.AdvertiseHost != "" {
		remoteOpts = append(remoteOpts, remote.WithAdvertisedHost(cfg.AdvertiseHost))
	}
	ccfg := protocluster.Configure(cfg.Name, provider, disthash.New(), remote.Configure(cfg.Host, cfg.Port, remoteOpts...),
		protocluster.WithKinds(m.kinds()...))
	m.cluster = protocluster.New(m.system, ccfg)
	m.system.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*protocluster.ClusterTopology); ok {
			addrs := make([]string, 0, len(t.GetMembers()))
			for _, mem := range t.GetMembers() {
				addrs = append(addrs, mem.Address())
			}
			m.mu.Lock()
			m.members = addrs
			m.mu.Unlock()
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
	m.cluster.Shutdown(true)
}

// startMember runs protoactor's StartMember, which panics on errors.
func (m *Member) startMember() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cluster: starting member %q: %v", m.cfg.Name, r)
			m.system.Shutdown()
			if m.cluster.Remote != nil {
				m.cluster.Remote.Shutdown(false)
			}
		}
	}()
	m.cluster.StartMember()
	return nil
}

func (m *Member) startRouters() error {
	for _, p := range m.cfg.Providers {
		r := m.newRouter(CredentialsKind, p.Name)
		r.view = m.views.creds[p.Name]
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
		attempts: m.cfg.RequestAttempts, log: m.log,
		waiting: map[string]*budgetWait{}, held: map[string]*actor.PID{}}
}

// Wire puts the node's routers and views into d, where a single-machine
// runtime puts its own credentials and fallback actors: Credentials and
// Keys for providers with credentials, Budgets for providers with a
// budget, Views, Fallbacks. Sessions spawned on System() with d then use
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
		if len(p.Credentials) == 0 {
			continue
		}
		if d.Credentials == nil {
			d.Credentials = map[string]*actor.PID{}
		}
		if d.Keys == nil {
			d.Keys = map[string]map[string]string{}
		}
		d.Credentials[p.Name] = pid
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
