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
	"syscall"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cmd/musepi/internal/opsview"
	"github.com/musepi/musepi/config"
	"github.com/musepi/musepi/config/clustercfg"
)

var nodeCommand = &command{
	summary:  "run a cluster node (musepi node --config FILE)",
	synopsis: []string{"--config FILE [--metrics-addr ADDR]"},
	about: `
Runs one node of a cluster (the file's [cluster] table: name, address, etcd or
automanaged membership, database URL, TLS). Serves until SIGTERM or SIGINT,
then leaves gracefully within leave_timeout_ms. With --metrics-addr it also
serves the members it sees on /cluster/members, for "musepi cluster status".
See docs/cluster.md.`,
	setup: setupNode,
}

// setupNode is "musepi node --config FILE".
func setupNode(fs *flag.FlagSet) func([]string) error {
	setupFlags := addLogFlags(fs)
	configPath := fs.String("config", "", "configuration file with a [cluster] table (required; see config/README.md)")
	metricsAddr := checkedString(fs, "metrics-addr", "", "serve Prometheus metrics on http://`ADDR`/metrics, and the members the node sees on /cluster/members (host:port; port 0 picks a free one; the address is printed on stderr; without a host, every interface)", config.CheckListenAddress)
	return func([]string) error {
		if *configPath == "" {
			return usagef("--config is required")
		}
		if err := setupFlags.check(fs); err != nil {
			return err
		}
		return runNode(*configPath, *metricsAddr, setupFlags.log)
	}
}

// runNode joins the cluster the file's [cluster] table describes, serves
// until SIGTERM or SIGINT, then leaves gracefully within the table's
// leave_timeout_ms.
//
// Its lifecycle lines on stderr ("musepi node: ...") are for operators
// and the multi-process tests: where it listens, every change of the
// member list, leaving and how long leaving took.
func runNode(configPath, metricsAddr string, log *slog.Logger) error {
	cfg, err := clustercfg.Load(configPath)
	if err != nil {
		return err
	}
	var view memberView
	metrics, url, err := nodeMetrics(metricsAddr, cfg, &view)
	if err != nil {
		return err
	}
	var extra []musepi.Option
	if metrics != nil {
		defer closeMetrics(metrics)
		extra = append(extra, metrics.option())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	for rejoin := false; ; rejoin = true {
		rt, err := joinUntil(ctx, stop, cfg, url, log, extra, rejoin)
		if err != nil {
			return errors.New(oneLine(err))
		}
		announce(cfg.Cluster, rt)
		view.rt.Store(rt)
		dropped := serve(ctx, rt)
		view.rt.Store(nil)
		if !dropped {
			stop() // a second signal kills the process
			return leaveGracefully(rt, cfg.Cluster.LeaveTimeout)
		}
		// The others dropped this node (it was paused, or cut off from
		// etcd, past its lease) and will not take it back as itself:
		// leave, and join as a new member. (The member has said so in
		// its log line.)
		if err := leave(rt, cfg.Cluster.LeaveTimeout); err != nil {
			fmt.Fprintf(stderr, "musepi node: leave: %v\n", err)
		}
	}
}

// nodeMetrics serves the node's metrics on addr, and in a cluster its
// member view there: it returns the server (nil when addr is empty) and
// the view's URL.
func nodeMetrics(addr string, cfg *clustercfg.Config, view *memberView) (*metricsServer, string, error) {
	if addr == "" {
		return nil, "", nil
	}
	metrics, err := serveMetrics("musepi node", addr)
	if err != nil {
		return nil, "", err
	}
	if cfg.Cluster == nil { // (without one, joinNode says so)
		return metrics, "", nil
	}
	metrics.handle("GET "+opsview.ViewPath, view)
	return metrics, viewURL(metrics.addr, cfg.Cluster), nil
}

// announce says where the node listens, in which cluster, membership and
// transport.
func announce(c *clustercfg.Cluster, rt *musepi.Runtime) {
	transport := "mutual TLS"
	if c.TLS == nil {
		transport = "plaintext"
	}
	fmt.Fprintf(stderr, "musepi node: %s listening on %s (cluster %q, %s membership, %s)\n",
		nodeName(c), rt.ClusterAddress(), c.Name, c.Membership, transport)
}

// leaveGracefully leaves the cluster within bound, saying so and how long
// it took.
func leaveGracefully(rt *musepi.Runtime, bound time.Duration) error {
	fmt.Fprintf(stderr, "musepi node: leaving (bound %s)\n", bound)
	start := time.Now()
	if err := leave(rt, bound); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	fmt.Fprintf(stderr, "musepi node: left in %s\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// rejoinPause is how long a node that was dropped waits between two
// attempts to join again.
const rejoinPause = 2 * time.Second

// joinUntil joins the cluster (joinNode). A first join that fails is the
// command's failure; a node that joins again after the cluster dropped it
// (it was cut off from etcd or from the database) tries again every
// rejoinPause until it is back or a signal comes: what cut it off is
// likely still away.
func joinUntil(ctx context.Context, stop func(), cfg *clustercfg.Config, url string, log *slog.Logger, extra []musepi.Option, rejoin bool) (*musepi.Runtime, error) {
	for {
		if cc := cfg.Cluster; cc != nil { // (without one, joinNode says so)
			fmt.Fprintf(stderr, "musepi node: %s joining cluster %q (%s membership)\n", nodeName(cc), cc.Name, cc.Membership)
		}
		rt, err := joinNode(ctx, stop, cfg, url, log, extra)
		if err == nil || !rejoin || errors.Is(err, errInterrupted) {
			return rt, err
		}
		fmt.Fprintf(stderr, "musepi node: join again: %s; trying again in %s\n", oneLine(err), rejoinPause)
		select {
		case <-ctx.Done():
			return nil, errInterrupted
		case <-time.After(rejoinPause):
		}
	}
}

// serve prints the node's member list (report) until ctx ends or the
// cluster drops the node; it reports whether it was dropped.
func serve(ctx context.Context, rt *musepi.Runtime) (dropped bool) {
	rctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		report(rctx, rt)
	}()
	select {
	case <-ctx.Done():
	case <-rt.ClusterDropped():
		dropped = true
	}
	cancel()
	<-watched
	return dropped
}

// startUnwind bounds how long an interrupted start has to undo itself.
const startUnwind = 5 * time.Second

// errInterrupted is the start's error when SIGINT or SIGTERM came first.
var errInterrupted = errors.New("interrupted before the start completed")

// joinNode is clustercfg's Config.Join answering SIGINT and SIGTERM (the
// end of ctx) at every moment of the start. Parts of the start take no context
// (protoactor's member start, the membership's registration), so the join
// runs on a goroutine of its own. Once ctx ends, stopSignals makes a second
// signal kill the process, the join has startUnwind to undo itself (the
// parts that take ctx return at once; a member that joined leaves), and
// joinNode fails with errInterrupted.
func joinNode(ctx context.Context, stopSignals func(), cfg *clustercfg.Config, viewURL string, log *slog.Logger, extra []musepi.Option) (*musepi.Runtime, error) {
	type joined struct {
		rt  *musepi.Runtime
		err error
	}
	done := make(chan joined, 1)
	go func() {
		rt, err := cfg.Join(ctx, false, viewURL, log, extra...)
		done <- joined{rt, err}
	}()
	select {
	case j := <-done:
		if j.err != nil && ctx.Err() != nil {
			return nil, errInterrupted
		}
		return j.rt, j.err
	case <-ctx.Done():
	}
	stopSignals()
	select {
	case j := <-done:
		if j.err == nil { // the start completed as the signal came
			if err := leave(j.rt, startUnwind); err != nil {
				return nil, fmt.Errorf("%w; leave: %v", errInterrupted, err)
			}
		}
		return nil, errInterrupted
	case <-time.After(startUnwind):
		return nil, fmt.Errorf("%w; still starting %s later: exiting without it", errInterrupted, startUnwind)
	}
}

// oneLine is err's text on one line: pgx puts each address it tried to
// connect to (a URL's hosts, a name's addresses: localhost is often ::1
// and 127.0.0.1) on a line of its own.
func oneLine(err error) string {
	return strings.NewReplacer(":\n\t", ": ", "\n\t", "; ", "\n", " ").Replace(err.Error())
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
func nodeName(c *clustercfg.Cluster) string {
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
		if p := cluster.MemberOf(rt).Propagation(); p.Count != propagated {
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
