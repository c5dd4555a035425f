package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// stormCluster is MusePi in cluster mode as a contender's setup: nodes
// joined in this process (each its own protoactor member with its gRPC
// remote, automanaged membership on loopback, its own PostgreSQL store),
// the sessions' handles spread over them, and at mid-outage the last node
// leaving (Shutdown: its sessions hand over to the others).
type stormCluster struct {
	nodes []*musepi.Runtime
	via   *nodeProviders

	leaveMu   sync.Mutex
	leftAt    time.Time     // when the last node began to leave
	leaveTook time.Duration // how long its Shutdown took
	leaveErr  error
	leaveDone chan struct{}
}

// clusterDB is the PostgreSQL server the cluster runs of a storm share:
// -database, or a private server started for the run.
type clusterDB struct {
	url    string         // of the server's maintenance database
	server *pgtest.Server // nil with -database
	runs   atomic.Int32
}

// startClusterDB connects to url, or starts a private server when url is
// empty (initdb and postgres on PATH or in /usr/lib/postgresql/*/bin).
func startClusterDB(ctx context.Context, url string) (*clusterDB, error) {
	if url != "" {
		return &clusterDB{url: url}, nil
	}
	srv, err := pgtest.Launch(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster mode: a private PostgreSQL (or give -database): %w", err)
	}
	return &clusterDB{url: srv.URL("postgres"), server: srv}, nil
}

// newDatabase creates an empty database for one run and returns its URL.
func (d *clusterDB) newDatabase(ctx context.Context) (string, error) {
	conn, err := pgx.Connect(ctx, d.url)
	if err != nil {
		return "", fmt.Errorf("cluster mode: database: %w", err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("musepi_storm_%d_%d", time.Now().UnixNano(), d.runs.Add(1))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("cluster mode: create database: %w", err)
	}
	cfg, err := pgx.ParseConfig(d.url)
	if err != nil {
		return "", err
	}
	cfg.Database = name
	return cfg.ConnString(), nil
}

func (d *clusterDB) stop() {
	if d.server != nil {
		_ = d.server.Stop()
	}
}

// startStormCluster joins n nodes with opts (each with the provider prov,
// wrapped to tell which node sent each request) on a new database.
func startStormCluster(ctx context.Context, db *clusterDB, n int, prov provider.Provider, sessions int, opts func(p provider.Provider) []musepi.Option) (_ *stormCluster, err error) {
	url, err := db.newDatabase(ctx)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	peers := make([]string, n)
	for i := range n {
		peers[i] = net.JoinHostPort(cluster.DefaultHost, strconv.Itoa(ports[n+i]))
	}
	c := &stormCluster{via: &nodeProviders{last: make([]int32, sessions)}, leaveDone: make(chan struct{})}
	defer func() {
		if err != nil {
			c.close(context.Background())
		}
	}()
	for i := range n {
		st, err := pgstore.Connect(ctx, url, pgstore.WithNode(fmt.Sprintf("storm-node-%d", i+1)))
		if err != nil {
			return nil, fmt.Errorf("cluster mode: node %d: %w", i+1, err)
		}
		cc := cluster.JoinConfig{Name: "storm", Host: cluster.DefaultHost, Port: ports[i], Store: st,
			Membership: cluster.Automanaged(cluster.AutomanagedConfig{Port: ports[n+i], Peers: peers})}
		rt, err := cluster.Join(ctx, cc, opts(c.via.node(prov, i))...)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("cluster mode: node %d: %w", i+1, err)
		}
		c.nodes = append(c.nodes, rt)
	}
	return c, nil
}

// freePorts are n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(cluster.DefaultHost, "0"))
		if err != nil {
			return nil, fmt.Errorf("cluster mode: free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// handle is the node session i's handle is made on: spread round robin
// over the nodes that stay (a node that leaves takes its callers' prompts
// with it: they end with ErrShutdown).
func (c *stormCluster) handle(i int) *musepi.Runtime {
	return c.nodes[i%max(len(c.nodes)-1, 1)]
}

// leaveLast makes the last node leave (its Shutdown hands its sessions
// over), in the background; the time it begins is the node loss's.
func (c *stormCluster) leaveLast() {
	if !c.leaves() {
		return
	}
	last := c.nodes[len(c.nodes)-1]
	c.leaveMu.Lock()
	c.leftAt = time.Now()
	c.via.leave(len(c.nodes)-1, c.leftAt)
	c.leaveMu.Unlock()
	go func() {
		defer close(c.leaveDone)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		t0 := time.Now()
		err := last.Shutdown(ctx)
		c.leaveMu.Lock()
		c.leaveTook, c.leaveErr = time.Since(t0), err
		c.leaveMu.Unlock()
	}()
}

// leaves reports whether a node leaves at mid-outage: with 2 nodes or more.
func (c *stormCluster) leaves() bool { return len(c.nodes) > 1 }

// figures are the cluster's own: the node that left, its sessions moved,
// and how long after the leave began they sent their next request.
func (c *stormCluster) figures(extra map[string]float64) {
	c.leaveMu.Lock()
	defer c.leaveMu.Unlock()
	extra["cluster_nodes"] = float64(len(c.nodes))
	if c.leftAt.IsZero() {
		return
	}
	extra["leave_seconds"] = c.leaveTook.Seconds()
	moved, stayed := c.via.afterLeave()
	extra["sessions_moved"] = float64(len(moved))
	if len(moved) > 0 {
		extra["moved_next_request_p50_ms"] = durationMs(quantile(moved, 0.5))
		extra["moved_next_request_p99_ms"] = durationMs(quantile(moved, 0.99))
		extra["moved_next_request_max_ms"] = durationMs(moved[len(moved)-1])
	}
	if len(stayed) > 0 {
		extra["stayed_next_request_p50_ms"] = durationMs(quantile(stayed, 0.5))
		extra["stayed_next_request_p99_ms"] = durationMs(quantile(stayed, 0.99))
	}
}

// quantile of sorted ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// close shuts every node down (the one that left has); each node's
// Shutdown closes its store.
func (c *stormCluster) close(ctx context.Context) error {
	var errs []error
	for i, rt := range c.nodes {
		if i == len(c.nodes)-1 && !c.leftAtZero() {
			<-c.leaveDone
			c.leaveMu.Lock()
			errs = append(errs, c.leaveErr)
			c.leaveMu.Unlock()
			continue
		}
		errs = append(errs, rt.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

func (c *stormCluster) leftAtZero() bool {
	c.leaveMu.Lock()
	defer c.leaveMu.Unlock()
	return c.leftAt.IsZero()
}

// nodeProviders tell which node sent each session's requests and, once
// a node left, how long after that each session sent its next request
// from another node.
type nodeProviders struct {
	mu      sync.Mutex
	last    []int32 // node of session i's last request (+1; 0: none yet)
	atLeave []int32 // last, when the node left (nil before)
	left    int32   // the node that left (+1)
	leftAt  time.Time
	moved   map[int]time.Duration // sessions the node that left served last
	stayed  map[int]time.Duration // the others
}

// node is prov as node i's provider.
func (n *nodeProviders) node(prov provider.Provider, i int) provider.Provider {
	return &nodeProvider{Provider: prov, via: n, node: int32(i + 1)}
}

// leave marks node i leaving at t.
func (n *nodeProviders) leave(i int, t time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.atLeave, n.left, n.leftAt = slices.Clone(n.last), int32(i+1), t
	n.moved, n.stayed = map[int]time.Duration{}, map[int]time.Duration{}
}

// sent notes a request of session from node.
func (n *nodeProviders) sent(session int, node int32) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if session < 0 || session >= len(n.last) {
		return
	}
	n.last[session] = node
	if n.atLeave == nil || node == n.left {
		return
	}
	since := time.Since(n.leftAt)
	switch host := n.atLeave[session]; {
	case host == n.left:
		if _, seen := n.moved[session]; !seen {
			n.moved[session] = since
		}
	case host != 0:
		if _, seen := n.stayed[session]; !seen {
			n.stayed[session] = since
		}
	}
}

// afterLeave are the delays to the next request of the sessions moved
// and of the others, sorted.
func (n *nodeProviders) afterLeave() (moved, stayed []time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, d := range n.moved {
		moved = append(moved, d)
	}
	for _, d := range n.stayed {
		stayed = append(stayed, d)
	}
	slices.Sort(moved)
	slices.Sort(stayed)
	return moved, stayed
}

// nodeProvider is one node's view of the storm's provider.
type nodeProvider struct {
	provider.Provider
	via  *nodeProviders
	node int32
}

// MaxOutputTokens is the storm provider's output bound, which pacing
// reserves (provider.OutputBounded; 0: it has none).
func (p *nodeProvider) MaxOutputTokens() int64 {
	if b, ok := p.Provider.(provider.OutputBounded); ok {
		return b.MaxOutputTokens()
	}
	return 0
}

// Stream notes which node sent the request, then streams it.
func (p *nodeProvider) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta)) *messages.AssistantMessage {
	if i, err := strconv.Atoi(req.SessionID); err == nil {
		p.via.sent(i, p.node)
	}
	return p.Provider.Stream(ctx, req, onDelta)
}
