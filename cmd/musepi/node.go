package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	protocluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/config"
)

func init() {
	commands["node"] = command{summary: "run a cluster node (musepi node --config FILE)", run: runNode}
}

// runNode is "musepi node --config FILE": it joins the cluster the file's
// [cluster] table describes, serves until SIGTERM or SIGINT, then leaves
// gracefully within the table's leave_timeout_ms.
//
// Its lifecycle lines on stderr ("musepi node: ...") are for operators
// and the multi-process tests: where it listens, every change of the
// member list, leaving and how long leaving took.
func runNode(args []string) int {
	fs := flag.NewFlagSet("musepi node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setupFlags := addLogFlags(fs)
	configPath := fs.String("config", "", "configuration file with a [cluster] table (required; see config/README.md)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics on http://ADDR/metrics (host:port; port 0 picks a free one; the address is printed on stderr)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: musepi node --config FILE [--metrics-addr ADDR]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Runs one node of a cluster (the file's [cluster] table: name, address, etcd or")
		fmt.Fprintln(stderr, "automanaged membership, database URL). Serves until SIGTERM or SIGINT, then")
		fmt.Fprintln(stderr, "leaves gracefully within leave_timeout_ms. See docs/cluster.md.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *configPath == "" {
		fmt.Fprintln(stderr, "musepi node: --config is required")
		fs.Usage()
		return 2
	}
	log, err := setupFlags.logger()
	if err != nil {
		fmt.Fprintf(stderr, "musepi node: %v\n", err)
		return 2
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if cfg.Cluster == nil {
		fmt.Fprintf(stderr, "musepi node: %s has no [cluster] table (see config/README.md)\n", *configPath)
		return 1
	}
	if *metricsAddr != "" {
		metrics, err := startMetrics(*metricsAddr)
		if err != nil {
			fmt.Fprintf(stderr, "musepi node: %v\n", err)
			return 1
		}
		defer closeMetrics(metrics)
		fmt.Fprintf(stderr, "musepi node: metrics on %s\n", metrics.URL())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	n, err := joinNode(ctx, cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "musepi node: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "musepi node: %s listening on %s (cluster %q, %s membership)\n",
		n.store.Node(), n.member.Address(), cfg.Cluster.Name, cfg.Cluster.Membership)
	n.reportMembers()

	<-ctx.Done()
	stop() // a second signal kills the process
	if p := n.member.Propagation(); p.Count > 0 {
		fmt.Fprintf(stderr, "musepi node: block propagation to this node: %d changes, mean %s, max %s\n",
			p.Count, p.Mean.Round(time.Microsecond), p.Max.Round(time.Microsecond))
	}
	fmt.Fprintf(stderr, "musepi node: leaving (bound %s)\n", cfg.Cluster.LeaveTimeout)
	start := time.Now()
	lctx, cancel := context.WithTimeout(context.Background(), cfg.Cluster.LeaveTimeout)
	defer cancel()
	if err := n.leave(lctx); err != nil {
		fmt.Fprintf(stderr, "musepi node: leave: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "musepi node: left in %s\n", time.Since(start).Round(time.Millisecond))
	return 0
}

// node is a running cluster node: its member and its store.
type node struct {
	member *cluster.Member
	store  *pgstore.Store

	mu      sync.Mutex
	members []string // last reported
}

// joinNode connects to the database and joins the cluster.
func joinNode(ctx context.Context, cfg *config.Config, log zerolog.Logger) (*node, error) {
	cc := cfg.Cluster
	opts := []pgstore.Option{pgstore.WithLease(cc.Lease), pgstore.WithLogger(log)}
	if cc.NodeName != "" {
		opts = append(opts, pgstore.WithNode(cc.NodeName))
	}
	store, err := pgstore.Connect(ctx, cc.Database(), opts...)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	m, err := cluster.Start(cluster.Config{
		Name: cc.Name, Host: cc.Host, Port: cc.Port, Membership: cc.MembershipProvider(),
		Providers: clusterProviders(cfg), FallbackChains: cfg.Retry.FallbackChains, Blocks: store,
		RequestTimeout: cc.RequestTimeout, RequestAttempts: cc.RequestAttempts,
		Logger: slog.New(zerolog.NewSlogHandler(log)),
	})
	if err != nil {
		return nil, errors.Join(err, store.Close())
	}
	return &node{member: m, store: store}, nil
}

// clusterProviders are the file's providers as the cluster's shared actors
// take them: their credentials with the keys (Load checked that every
// variable is set), auto_redeem and the retry budget.
func clusterProviders(cfg *config.Config) []cluster.Provider {
	var out []cluster.Provider
	for _, name := range cfg.ProviderNames() {
		p := cfg.Providers[name]
		creds := make([]actors.Credential, len(p.Credentials))
		for i, cr := range p.Credentials {
			creds[i] = actors.Credential{Name: cr.Name, APIKey: strings.TrimSpace(os.Getenv(cr.APIKeyEnv)), BankedResets: cr.BankedResets}
		}
		out = append(out, cluster.Provider{Name: name, Credentials: creds, AutoRedeem: cfg.AutoRedeem, Budget: cfg.Retry.Budget})
	}
	return out
}

// reportMembers prints the member list now and at every change.
func (n *node) reportMembers() {
	n.printMembers(n.member.Members())
	n.member.System().EventStream.Subscribe(func(evt any) {
		t, ok := evt.(*protocluster.ClusterTopology)
		if !ok {
			return
		}
		addrs := make([]string, 0, len(t.GetMembers()))
		for _, m := range t.GetMembers() {
			addrs = append(addrs, m.Address())
		}
		n.printMembers(addrs)
	})
}

// printMembers prints "musepi node: members (N): a, b, c" when the sorted
// list differs from the last one printed.
func (n *node) printMembers(addrs []string) {
	slices.Sort(addrs)
	n.mu.Lock()
	defer n.mu.Unlock()
	if slices.Equal(addrs, n.members) || len(addrs) == 0 {
		return
	}
	n.members = addrs
	fmt.Fprintf(stderr, "musepi node: members (%d): %s\n", len(addrs), strings.Join(addrs, ", "))
}

// leave leaves the cluster and closes the store, within ctx.
func (n *node) leave(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- n.member.Leave() }()
	select {
	case err := <-done:
		return errors.Join(err, n.store.Close())
	case <-ctx.Done():
		return fmt.Errorf("not done within the bound: %w", ctx.Err())
	}
}
