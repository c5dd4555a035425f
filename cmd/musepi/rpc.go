package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/config"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/rpc"
)

var rpcCommand = &command{
	summary:  "serve a session as JSON lines on stdin/stdout",
	synopsis: []string{"[--config FILE [--cluster] | --provider NAME --model ID [--base-url URL]]"},
	about: `
Serves one session as JSON lines on stdin/stdout (see docs/rpc.md). Without
--config or --provider it runs against the built-in demo server (no API key
needed). With --cluster the session is hosted by the nodes of the file's
cluster (musepi node); --session-id reaches an existing one. Logs go to
stderr only. Pacing (the rate-limit budget of each key, and --priority)
is per process: processes that share a key pace only their own calls;
sharing a key across processes is what --cluster is for.`,
	setup: setupRPC,
}

// rpcFlags are the flags of "musepi rpc".
type rpcFlags struct {
	*setupFlags
	maxLine     int
	sessionID   string
	metricsAddr string
	priority    string
}

// setupRPC is "musepi rpc": JSON lines on stdin/stdout (see docs/rpc.md).
func setupRPC(fs *flag.FlagSet) func([]string) error {
	f := rpcFlags{setupFlags: addSetupFlags(fs)}
	fs.IntVar(&f.maxLine, "max-line", rpc.DefaultMaxLine, "longest accepted input line in bytes (0: the default)")
	fs.StringVar(&f.sessionID, "session-id", "", "session id (with --history-dir, resumes that session's history)")
	fs.BoolVar(&f.cluster, "cluster", false, "reach sessions hosted anywhere in the cluster of --config's [cluster] table (joins it as a client member that hosts none)")
	fs.StringVar(&f.priority, "priority", "normal", "the session's pacing priority: high, normal or low (a prompt's \"priority\" changes it)")
	checkedStringVar(fs, &f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on http://`ADDR`/metrics (host:port; port 0 picks a free one; the address is printed on stderr; without a host, every interface)", config.CheckListenAddress)
	return func([]string) error {
		if f.maxLine < 0 {
			return usagef("--max-line must be 0 (the default, %d) or more, got %d", rpc.DefaultMaxLine, f.maxLine)
		}
		if _, err := pacing.ParsePriority(f.priority); err != nil {
			return usagef("--priority: %v", err)
		}
		if err := f.check(fs); err != nil {
			return err
		}
		return runRPC(f)
	}
}

// runRPC serves the session until stdin ends or SIGINT or SIGTERM.
func runRPC(f rpcFlags) (err error) {
	var extra []musepi.Option
	if f.metricsAddr != "" {
		metrics, err := serveMetrics("musepi rpc", f.metricsAddr)
		if err != nil {
			return err
		}
		defer closeMetrics(metrics)
		extra = append(extra, metrics.option())
	}
	priority, _ := pacing.ParsePriority(f.priority) // checked in setupRPC
	su, err := f.open(extra...)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, shutdown(su)) }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A client that closes our stdout must not kill the process with
	// SIGPIPE before the history is flushed: with SIGPIPE caught, the write
	// fails with EPIPE, which the server logs and shuts down on.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	srv := &rpc.Server{
		Runtime:        su.rt,
		SessionOptions: []musepi.SessionOption{musepi.WithModel(su.model), musepi.WithSessionID(f.sessionID), musepi.WithPriority(priority)},
		Out:            os.Stdout,
		Log:            f.log,
		MaxLine:        f.maxLine,
		Models:         su.models,
		HistoryDir:     su.historyDir,
	}
	return srv.Serve(ctx, os.Stdin)
}

// closeMetrics stops serving metrics, giving scrapes in progress five seconds.
func closeMetrics(m *metricsServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.close(ctx); err != nil {
		fmt.Fprintf(stderr, "musepi: metrics: %v\n", err)
	}
}

// shutdown stops a setup's runtime, giving it ten seconds: its failure
// is the command's (status 1).
func shutdown(su *setup) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := su.shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
