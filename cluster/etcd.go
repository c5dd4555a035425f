package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	protocluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// EtcdConfig configures the etcd membership.
type EtcdConfig struct {
	// Endpoints are the etcd client URLs; required.
	Endpoints []string
	// Prefix is the key prefix of the cluster's members (default
	// "/musepi").
	Prefix string
	// DialTimeout bounds connecting to etcd and each call of the start
	// and the leave (default 5 s): a node whose etcd cannot be reached
	// fails to start within it.
	DialTimeout time.Duration
	// TTL is the lease of a member's key (default DefaultEtcdTTL, at
	// least 2 s): a member that does not renew it within TTL is dropped
	// by the others.
	TTL time.Duration
	// TLS, if set, is the etcd client's TLS: RootCAs verify etcd's server
	// certificate, Certificates (optional) are the client certificate
	// etcd's --client-cert-auth asks for. It applies to https://
	// endpoints; the client dials http:// ones in plaintext.
	TLS *tls.Config
}

// DefaultEtcdTTL is EtcdConfig.TTL's default: protoactor's own provider's.
const DefaultEtcdTTL = 3 * time.Second

// Etcd is the etcd membership: each member holds a key under a lease it
// keeps alive, and every node lists and watches the keys.
//
// It replaces protoactor's etcd provider, whose calls take no deadline (a
// wrong endpoint hangs the start), which drops its own key from its member
// list and never adds it back when its lease ran out during a pause, and
// which cannot tell a paused node that it was dropped. Here every call of
// the start is bounded by DialTimeout; a member that finds its lease gone
// (its process was paused past TTL, so the others removed it and
// protoactor blocks its id for good) reports itself dropped
// (Member.Dropped) instead of lingering half in the cluster; and losing
// etcd and finding it again are logged once each, while the member list
// stays as it was.
func Etcd(cfg EtcdConfig) Membership {
	return Membership{name: "etcd", start: func(m *Member) (protocluster.ClusterProvider, func(), error) {
		cfg, err := cfg.withDefaults()
		if err != nil {
			return nil, nil, err
		}
		p := &etcdMembers{cfg: cfg, member: m, members: map[string]*etcd.Node{}, left: map[string]bool{}}
		p.ctx, p.cancel = context.WithCancel(context.Background())
		p.news = make(chan struct{})
		m.sureUntil, m.settled, m.newsCh, m.leftGracefully = p.sureUntil, p.settled, p.nextNews, p.leftGracefully
		m.deregister = p.deregister
		return p, p.close, nil
	}}
}

// withDefaults checks cfg and fills in its defaults.
func (cfg EtcdConfig) withDefaults() (EtcdConfig, error) {
	if len(cfg.Endpoints) == 0 {
		return cfg, fmt.Errorf("%w: etcd needs Endpoints", ErrConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/musepi"
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	switch {
	case cfg.TTL == 0:
		cfg.TTL = DefaultEtcdTTL
	case cfg.TTL < 2*time.Second:
		return cfg, fmt.Errorf("%w: etcd TTL %v is under 2 s (etcd's leases count whole seconds)", ErrConfig, cfg.TTL)
	}
	return cfg, nil
}

// client is a client of cfg's etcd.
func (cfg EtcdConfig) client() (*clientv3.Client, error) {
	client, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: cfg.DialTimeout, TLS: cfg.TLS,
		DialKeepAliveTime: keepAliveTime, DialKeepAliveTimeout: keepAliveTimeout,
		Logger: zap.NewNop(), DialOptions: []grpc.DialOption{reconnectSoon}})
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd client: %w", err)
	}
	return client, nil
}

// membersPrefix is the prefix of cluster name's member keys.
func (cfg EtcdConfig) membersPrefix(name string) string { return path.Join(cfg.Prefix, name) + "/" }

// MemberInfo is what a node publishes about itself with its member key in
// etcd, next to protoactor's description of the member (its id, host,
// port and kinds), for operators: `musepi cluster status` reads it.
type MemberInfo struct {
	// StoreNode is the node's id in the cluster's database
	// (pgstore.Store.Node: name#incarnation).
	StoreNode string `json:"store_node,omitempty"`
	// ViewURL is where the node serves the members it sees over HTTP;
	// "" when it serves none.
	ViewURL string `json:"view_url,omitempty"`
	// Client is true for a member that hosts nothing (Config.Client: a
	// `musepi rpc --cluster`); the membership sets it.
	Client bool `json:"client,omitempty"`
}

// etcdValue is a member key's value: protoactor's etcd.Node JSON, which
// is all protoactor's own provider reads, and MusePi's MemberInfo.
type etcdValue struct {
	etcd.Node
	MusePi *MemberInfo `json:"musepi,omitempty"`
}

// memberValue is the value of node's key with info.
func memberValue(node *etcd.Node, info MemberInfo) ([]byte, error) {
	return json.Marshal(etcdValue{Node: *node, MusePi: &info})
}

// EtcdMember is one member's key, as EtcdMembers reads it.
type EtcdMember struct {
	Key     string
	ID      string // the member's id (its actor system's)
	Address string // host:port, as the member advertises it
	Kinds   []string
	Info    MemberInfo
}

// EtcdMembers reads the member keys of cluster name from cfg's etcd, with
// one Get bounded by cfg.DialTimeout, sorted by address. It is read-only:
// it registers nothing and watches nothing. Keys whose value is not a
// member description, and those of members leaving (marked not alive),
// are left out, as the members leave them out.
func EtcdMembers(ctx context.Context, cfg EtcdConfig, name string) ([]EtcdMember, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	client, err := cfg.client()
	if err != nil {
		return nil, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	resp, err := client.Get(ctx, cfg.membersPrefix(name), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd at %v: %w", cfg.Endpoints, err)
	}
	var out []EtcdMember
	for _, kv := range resp.Kvs {
		var v etcdValue
		if json.Unmarshal(kv.Value, &v) != nil || !v.Alive {
			continue
		}
		host, port := v.GetAddress()
		m := EtcdMember{Key: string(kv.Key), ID: v.ID, Address: net.JoinHostPort(host, strconv.Itoa(port)), Kinds: v.Kinds}
		if v.MusePi != nil {
			m.Info = *v.MusePi
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b EtcdMember) int { return strings.Compare(a.Address, b.Address) })
	return out, nil
}

// reconnectSoon caps gRPC's reconnection backoff (120 s by default) at a
// third of the shortest TTL: after an outage etcd restores every lease
// with its whole TTL, and a member that reconnects later than that finds
// its lease gone and has to rejoin.
var reconnectSoon = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 600 * time.Millisecond},
	MinConnectTimeout: time.Second,
})

// keepAliveTime and keepAliveTimeout are the etcd client's gRPC
// keepalive: a ping after keepAliveTime without a read (gRPC's minimum,
// above etcd's default --grpc-keepalive-min-time of 5 s), answered within
// keepAliveTimeout. With keepalive on, gRPC also sets TCP_USER_TIMEOUT to
// keepAliveTimeout on the connection, so the kernel gives up on it once
// what it sent (the lease renewals, every third of the TTL) has gone
// unacknowledged that long. A link that drops packets (a partition, not
// a closed port) so ends the connection within seconds, and gRPC redials
// every reconnectSoon backoff: once the link is back the node reconnects
// within a second, instead of waiting out TCP's retransmission backoff on
// the old connection (8-9 s into a cut of some seconds, and growing), and
// learns at once whether it was dropped.
const (
	keepAliveTime    = 10 * time.Second
	keepAliveTimeout = 2 * time.Second
)

// etcdMembers is the etcd membership's protoactor cluster provider.
type etcdMembers struct {
	cfg    EtcdConfig
	client *clientv3.Client
	member *Member
	c      *protocluster.Cluster
	self   *etcd.Node
	key    string // self's key; "" for a client

	ctx    context.Context // ends at close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	lease   clientv3.LeaseID
	renewed atomic.Int64 // when the lease was last renewed (Member.sinceStart)
	// checked is when the last keep-alive that ended, whatever its outcome,
	// began (Member.sinceStart); outOfReach is set while etcd is.
	checked    atomic.Int64
	outOfReach atomic.Bool
	// news is closed, and replaced, as each keep-alive ends (Member.Settle
	// waits on it).
	newsMu sync.Mutex
	news   chan struct{}

	leaveOnce sync.Once
	leaveErr  error

	mu      sync.Mutex // guards members and left, from the watch
	members map[string]*etcd.Node
	left    map[string]bool // ids of the members that said they left
}

// StartMember registers the node under a new lease, lists the members and
// starts keeping the lease alive and watching the others.
func (p *etcdMembers) StartMember(c *protocluster.Cluster) error {
	if err := p.init(c); err != nil {
		return err
	}
	value, err := p.value(true)
	if err != nil {
		return err
	}
	err = p.call(func(ctx context.Context) error {
		lease, err := p.client.Grant(ctx, int64(p.cfg.TTL/time.Second))
		if err != nil {
			return fmt.Errorf("grant a lease: %w", err)
		}
		p.lease = lease.ID
		p.renewed.Store(int64(p.member.sinceStart()))
		_, err = p.client.Put(ctx, p.key, string(value), clientv3.WithLease(lease.ID))
		return err
	})
	if err != nil {
		return err
	}
	rev, err := p.list()
	if err != nil {
		return err
	}
	p.wg.Go(p.keepAlive)
	p.wg.Go(func() { p.watch(rev) })
	return nil
}

// StartClient lists the members and starts watching them; a client
// registers nothing.
func (p *etcdMembers) StartClient(c *protocluster.Cluster) error {
	if err := p.init(c); err != nil {
		return err
	}
	rev, err := p.list()
	if err != nil {
		return err
	}
	p.wg.Go(func() { p.watch(rev) })
	return nil
}

// Shutdown (protoactor's graceful leave) deregisters the node.
func (p *etcdMembers) Shutdown(bool) error { return p.deregister() }

// deregister tells the others that the node leaves (its key marked not
// alive, so they log a leave, not a loss), then removes the key at once by
// revoking its lease; each within DialTimeout. Only the first call acts.
func (p *etcdMembers) deregister() error {
	p.leaveOnce.Do(func() {
		p.cancel()
		p.wg.Wait()
		p.announce() // settled now: no keep-alive will come
		if p.lease == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
		defer cancel()
		if value, err := p.value(false); err == nil {
			_, _ = p.client.Put(ctx, p.key, string(value), clientv3.WithLease(p.lease))
		}
		if _, err := p.client.Revoke(ctx, p.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			p.leaveErr = fmt.Errorf("cluster: etcd: remove this node's key: %w", err)
		}
	})
	return p.leaveErr
}

// close deregisters the node if protoactor did not (a leave that was not
// graceful: a client's), then closes the client.
func (p *etcdMembers) close() {
	_ = p.deregister()
	if p.client != nil {
		_ = p.client.Close()
	}
}

// value is the value of the node's key: its description, alive or
// leaving, and its MemberInfo (Client from the member's Config).
func (p *etcdMembers) value(alive bool) ([]byte, error) {
	node := *p.self
	node.SetAlive(alive)
	info := p.member.cfg.Info
	info.Client = p.member.cfg.Client
	return memberValue(&node, info)
}

// leftGracefully reports whether member id marked itself not alive before
// its key went.
func (p *etcdMembers) leftGracefully(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.left[id]
}

// init connects to etcd and names the node's key. It runs once
// protoactor's remote has started: the remote sets gRPC's global logger as
// it starts, which must not happen while the etcd client's gRPC
// connection runs (a data race).
func (p *etcdMembers) init(c *protocluster.Cluster) (err error) {
	p.c = c
	if p.client, err = p.cfg.client(); err != nil {
		return err
	}
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return err
	}
	// The member id is the actor system's, as protoactor's other
	// providers have it: gossip and the remote's block list go by it.
	p.self = etcd.NewNode(c.ActorSystem.ID, host, port, c.GetClusterKinds())
	p.key = p.cfg.membersPrefix(c.Config.Name) + c.ActorSystem.ID
	return nil
}

// call runs f with a deadline of DialTimeout, naming the endpoints in
// its error.
func (p *etcdMembers) call(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
	defer cancel()
	if err := f(ctx); err != nil {
		return fmt.Errorf("cluster: etcd at %v: %w", p.cfg.Endpoints, err)
	}
	return nil
}

// list reads every member's key, publishes the topology and returns the
// revision it read at.
func (p *etcdMembers) list() (int64, error) {
	var resp *clientv3.GetResponse
	err := p.call(func(ctx context.Context) (err error) {
		resp, err = p.client.Get(ctx, p.prefix(), clientv3.WithPrefix())
		return err
	})
	if err != nil {
		return 0, err
	}
	members := map[string]*etcd.Node{}
	for _, kv := range resp.Kvs {
		if n, err := etcd.NewNodeFromBytes(kv.Value); err == nil && n.IsAlive() {
			members[string(kv.Key)] = n
		}
	}
	p.mu.Lock()
	p.members = members
	p.mu.Unlock()
	p.publish()
	return resp.Header.Revision, nil
}

func (p *etcdMembers) prefix() string { return p.cfg.membersPrefix(p.c.Config.Name) }

// publish hands the member list to protoactor.
func (p *etcdMembers) publish() {
	p.mu.Lock()
	list := make([]*protocluster.Member, 0, len(p.members)+1)
	for _, n := range p.members {
		list = append(list, n.MemberStatus())
	}
	p.mu.Unlock()
	p.c.MemberList.UpdateClusterTopology(list)
}

// watch applies the changes of the members' keys after revision rev until
// close. clientv3 resumes a broken watch where it stopped; a watch that
// cannot resume (the revision was compacted) lists the members anew.
func (p *etcdMembers) watch(rev int64) {
	for p.ctx.Err() == nil {
		ctx, cancel := context.WithCancel(p.ctx)
		for resp := range p.client.Watch(ctx, p.prefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if resp.Err() != nil {
				break
			}
			p.apply(resp.Events)
		}
		cancel() // ends the watch the loop broke out of
		if p.ctx.Err() != nil {
			return
		}
		for {
			r, err := p.list()
			if err == nil {
				rev = r
				break
			}
			if !p.sleep(time.Second) {
				return
			}
		}
	}
}

// apply applies the watch's events to the member list and publishes it.
// The node's own key deleted means the others dropped it.
func (p *etcdMembers) apply(events []*clientv3.Event) {
	p.mu.Lock()
	for _, ev := range events {
		key := string(ev.Kv.Key)
		switch ev.Type {
		case clientv3.EventTypePut:
			n, err := etcd.NewNodeFromBytes(ev.Kv.Value)
			switch {
			case err != nil:
			case !n.IsAlive(): // it is leaving (deregister)
				p.left[n.ID] = true
				delete(p.members, key)
			default:
				p.members[key] = n
			}
		case clientv3.EventTypeDelete:
			delete(p.members, key)
			if key == p.key {
				defer p.member.dropped("its key in etcd was removed (its lease ran out: was the process paused?)")
			}
		}
	}
	p.mu.Unlock()
	p.publish()
}

// keepAlive renews the node's lease every third of TTL until close. A
// lease etcd no longer has (the node did not renew it within TTL) means
// the others dropped the node: it reports itself dropped. etcd out of
// reach is logged once, and its return once.
func (p *etcdMembers) keepAlive() {
	tick := time.NewTicker(p.cfg.TTL / 3)
	defer tick.Stop()
	var lostAt time.Time // when etcd was found out of reach; zero while it is not
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-tick.C:
		}
		start := p.member.sinceStart()
		ctx, cancel := context.WithTimeout(p.ctx, p.cfg.TTL/3)
		_, err := p.client.KeepAliveOnce(ctx, p.lease)
		cancel()
		switch {
		case err == nil:
			p.renewed.Store(int64(start))
			p.outOfReach.Store(false)
			if !lostAt.IsZero() {
				// At the level of the loss, so that whoever saw the one sees
				// the other.
				p.member.own.Warn("etcd is reachable again", slog.Any("endpoints", p.cfg.Endpoints),
					slog.Duration("after", time.Since(lostAt).Round(time.Millisecond)))
				lostAt = time.Time{}
			}
		case p.ctx.Err() != nil:
			return
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			p.member.dropped("its lease in etcd ran out (was the process paused?)")
			return
		case lostAt.IsZero():
			p.member.own.Warn("etcd is out of reach; serving on with the members as they were",
				slog.Any("endpoints", p.cfg.Endpoints), slog.Any("error", err))
			lostAt = time.Now()
			p.outOfReach.Store(true)
		}
		p.checked.Store(int64(start)) // its outcome is known now (a dropped node has returned)
		p.announce()
	}
}

// nextNews is the channel closed when the next keep-alive ends.
func (p *etcdMembers) nextNews() <-chan struct{} {
	p.newsMu.Lock()
	defer p.newsMu.Unlock()
	return p.news
}

// announce tells Settle's waiters that a keep-alive has ended.
func (p *etcdMembers) announce() {
	p.newsMu.Lock()
	defer p.newsMu.Unlock()
	close(p.news)
	p.news = make(chan struct{})
}

// settled reports whether the node knows where it stands once it is no
// longer sure of its membership (Member.Settle): a keep-alive that began
// after its lease could have run out has ended (it renewed the lease, or
// found it gone and dropped the node), or etcd is out of reach, or the
// node is leaving and keeps its lease alive no more (then the database
// decides).
func (p *etcdMembers) settled() bool {
	return p.outOfReach.Load() || p.ctx.Err() != nil || time.Duration(p.checked.Load()) >= p.sureUntil()
}

// sureUntil is until when (Member.sinceStart) the node's key is certainly
// still in etcd: its last renewal's start plus TTL, less a third of TTL
// for the time etcd took to see the renewal and the clocks' drift.
func (p *etcdMembers) sureUntil() time.Duration {
	return time.Duration(p.renewed.Load()) + p.cfg.TTL*2/3
}

// sleep waits d or until close; false once closed.
func (p *etcdMembers) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
