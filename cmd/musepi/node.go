package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/musepi/musepi"
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
		fmt.Fprintln(stderr, "automanaged membership, database URL, TLS). Serves until SIGTERM or SIGINT, then")
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
	var extra []musepi.Option
	if *metricsAddr != "" {
		metrics, err := startMetrics(*metricsAddr)
		if err != nil {
			fmt.Fprintf(stderr, "musepi node: %v\n", err)
			return 1
		}
		defer closeMetrics(metrics)
		fmt.Fprintf(stderr, "musepi node: metrics on %s\n", metrics.URL())
		extra = append(extra, metrics.option())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rt, err := joinConfig(ctx, cfg, false, log, extra)
	if err != nil {
		fmt.Fprintf(stderr, "musepi node: %v\n", err)
		return 1
	}
	transport := "mutual TLS"
	if cfg.Cluster.TLS == nil {
		transport = "plaintext"
	}
	fmt.Fprintf(stderr, "musepi node: %s listening on %s (cluster %q, %s membership, %s)\n",
		nodeName(cfg.Cluster), rt.ClusterAddress(), cfg.Cluster.Name, cfg.Cluster.Membership, transport)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		report(ctx, rt)
	}()

	<-ctx.Done()
	stop() // a second signal kills the process
	<-watched
	fmt.Fprintf(stderr, "musepi node: leaving (bound %s)\n", cfg.Cluster.LeaveTimeout)
	start := time.Now()
	if err := leave(rt, cfg.Cluster.LeaveTimeout); err != nil {
		fmt.Fprintf(stderr, "musepi node: leave: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "musepi node: left in %s\n", time.Since(start).Round(time.Millisecond))
	return 0
}

// leave shuts the runtime down (a graceful leave) within bound. Parts of
// the leave take no context (protoactor's own, which waits on the
// membership service: with etcd gone it never returns), so the bound is
// kept here: past it, leave returns an error and the process exits with
// the leave unfinished; the other nodes then see it as a node loss.
func leave(rt *musepi.Runtime, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- rt.Shutdown(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("not done within %s (leave_timeout_ms); exiting without it", bound)
	}
}

// nodeName is the node's name in the database: node_name, or the host
// name.
func nodeName(c *config.Cluster) string {
	if c.NodeName != "" {
		return c.NodeName
	}
	host, _ := os.Hostname()
	return host
}

// report prints, until ctx ends, the node's member list whenever it
// changes ("musepi node: members (N): a, b, c") and how long the blocks
// and cooldowns other nodes published took to reach this one whenever one
// arrives ("musepi node: block propagation to this node: N changes, mean
// M, max X"). Both are polled every 50 ms: the member list is kept from
// protoactor's topology events, and reading either costs a copy.
func report(ctx context.Context, rt *musepi.Runtime) {
	var members []string
	var propagated int
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		addrs := rt.ClusterMembers()
		slices.Sort(addrs)
		if len(addrs) > 0 && !slices.Equal(addrs, members) {
			fmt.Fprintf(stderr, "musepi node: members (%d): %s\n", len(addrs), strings.Join(addrs, ", "))
			members = addrs
		}
		if p := rt.ClusterPropagation(); p.Count != propagated {
			fmt.Fprintf(stderr, "musepi node: block propagation to this node: %d changes, mean %s, max %s\n",
				p.Count, p.Mean.Round(time.Microsecond), p.Max.Round(time.Microsecond))
			propagated = p.Count
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
