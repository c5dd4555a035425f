package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	protocluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/internal/hosting"
)

// JoinConfig is how a runtime joins a cluster (Join). Every node of a
// cluster has the same Name and the same providers, credentials,
// fallback chains and budget (the options of Join).
type JoinConfig struct {
	// Name is the cluster's name; required, without '/' or '@'.
	Name string
	// Host is the address the node's remote (gRPC) server binds to;
	// default DefaultHost (loopback). Any other host needs TLS or
	// Insecure.
	Host string
	// Port is the remote server's port; 0 picks a free one.
	Port int
	// AdvertiseHost is the host:port the other nodes reach this one at,
	// when it is not Host:Port; empty: Host:Port. A node that cannot
	// connect to it itself is refused (Config.AdvertiseHost).
	AdvertiseHost string
	// Membership finds the other nodes: Etcd, Automanaged or InProcess.
	// Required.
	Membership Membership
	// TLS, if set, is the node's mutual TLS with the other members (and
	// clients): this node's certificate, and the cluster CA as RootCAs and
	// ClientCAs; see Config.TLS for what the certificate must hold.
	TLS *tls.Config
	// Insecure lets a node without TLS bind a non-loopback Host
	// (Config.Insecure).
	Insecure bool
	// Store is the shared durable state: the sessions' histories, their
	// activation epochs, the credential blocks and model cooldowns.
	// Required; Runtime.Shutdown closes it.
	Store *pgstore.Store
	// Client makes the node a member that hosts no activations (no
	// sessions, no shared actors): what `musepi rpc --cluster` uses to
	// reach sessions hosted by the others.
	Client bool
	// HandoverTimeout bounds how long a session that moves (its node
	// leaves, or the cluster's topology moves it) waits for a turn in
	// flight to end before it is stopped anyway, and how long its new
	// activation waits for the old one to release its history before it
	// takes it over; default DefaultHandoverTimeout.
	HandoverTimeout time.Duration
	// ViewURL is where the node serves the members it sees over HTTP for
	// operators (`musepi node --metrics-addr` serves it), published with
	// its member key in etcd next to its Store's node id (MemberInfo);
	// "" for none.
	ViewURL string
}

// DefaultHandoverTimeout is JoinConfig.HandoverTimeout's default.
const DefaultHandoverTimeout = 10 * time.Second

// Join starts a runtime that is a node of a cluster on protoactor-go's
// cluster: it hosts the sessions the identity lookup places on it (the
// session kind, SessionKind), and the shared credentials and fallback
// actors (unless cc.Client). opts are musepi.NewRuntime's; the providers,
// credentials, fallback chains and retry budget they set configure the
// shared actors. Its NewSession reaches a session wherever it is hosted.
// Cluster mode runs on the wall clock: WithClock is refused.
//
// ctx bounds the start: protoactor's part of it (about a second, and the
// membership's registration) takes no context, so a ctx that ends during
// it makes the node leave again once it is done, and Join fails with
// ctx's error.
func Join(ctx context.Context, cc JoinConfig, opts ...musepi.Option) (*musepi.Runtime, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cc, err := cc.withDefaults()
	if err != nil {
		return nil, err
	}
	public, rt, err := musepi.NewHostedRuntime(cc.Store, opts...)
	if err != nil {
		return nil, err
	}
	node := &clusterNode{rt: rt, cc: cc, ready: make(chan struct{}), done: make(chan struct{}),
		handles: map[string]*remoteSession{}, hosts: map[string]*actor.PID{}}
	var sessions *actor.Props
	if !cc.Client {
		sessions = actor.PropsFromProducer(func() actor.Actor { return &sessionHost{node: node} })
	}
	m, err := Start(cc.config(rt.Settings(), sessions))
	if err != nil {
		return nil, fmt.Errorf("musepi: join a cluster: %w", err)
	}
	if err := ctx.Err(); err != nil { // protoactor's start takes no context
		return nil, fmt.Errorf("musepi: join a cluster: %w", errors.Join(err, m.Leave()))
	}
	node.member = m
	rt.Attach(node, m)
	node.watchLeaving()
	close(node.ready)
	node.auditPrompts()
	if !cc.Client {
		node.checkLease()
		go node.abandonLeaseOnDrop()
	}
	if err := rt.Serve(cc.Client); err != nil {
		return nil, err
	}
	return public, nil
}

// withDefaults is cc with the default HandoverTimeout for a zero one; it
// refuses a JoinConfig without a Store or with a negative HandoverTimeout.
func (cc JoinConfig) withDefaults() (JoinConfig, error) {
	if cc.Store == nil {
		return cc, fmt.Errorf("cluster: Join: no Store (the sessions' histories are shared through it)")
	}
	if cc.HandoverTimeout < 0 {
		return cc, fmt.Errorf("cluster: Join: negative HandoverTimeout %v", cc.HandoverTimeout)
	}
	if cc.HandoverTimeout == 0 {
		cc.HandoverTimeout = DefaultHandoverTimeout
	}
	return cc, nil
}

// watchLeaving has the node learn of the members that leave the cluster,
// from the member's topology events.
func (n *clusterNode) watchLeaving() {
	n.member.System().EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*protocluster.ClusterTopology); ok {
			for _, left := range t.GetLeft() {
				go n.left(left.Address()) // the handles may be opening a session: not on the event stream
			}
		}
	})
}

// config is the member's Config: cc's addresses and membership, with the
// runtime's settings s for the shared actors and sessions for the session
// kind.
func (cc JoinConfig) config(s hosting.Settings, sessions *actor.Props) Config {
	out := Config{Name: cc.Name, Host: cc.Host, Port: cc.Port, AdvertiseHost: cc.AdvertiseHost,
		Membership: cc.Membership, TLS: cc.TLS, Insecure: cc.Insecure, Client: cc.Client, Blocks: cc.Store, Logger: s.Log,
		FallbackChains: s.FallbackChains, Info: MemberInfo{StoreNode: cc.Store.Node(), ViewURL: cc.ViewURL},
		Sessions: sessions}
	for _, p := range s.Providers {
		out.Providers = append(out.Providers, Provider{Name: p.Name, Credentials: p.Credentials, AutoRedeem: p.AutoRedeem, Budget: p.Budget, Pacing: p.Pacing, Refunds: p.Refunds, StickyWait: p.StickyWait,
			Overload: p.Overload})
	}
	return out
}

// MemberOf is the member of a runtime of Join (nil for any other
// runtime): its propagation figures, its view of the shared actors.
func MemberOf(rt *musepi.Runtime) *Member {
	if node, ok := musepi.HostedNode(rt).(*clusterNode); ok {
		return node.member
	}
	return nil
}
