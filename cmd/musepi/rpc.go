package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/rpc"
)

func init() {
	commands["rpc"] = command{summary: "serve a session as JSON lines on stdin/stdout", run: runRPC}
}

// runRPC is "musepi rpc": JSON lines on stdin/stdout (see docs/rpc.md);
// logs go to stderr only.
func runRPC(args []string) int {
	fs := flag.NewFlagSet("musepi rpc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setupFlags := addSetupFlags(fs)
	maxLine := fs.Int("max-line", rpc.DefaultMaxLine, "longest accepted input line in bytes (0: the default)")
	sessionID := fs.String("session-id", "", "session id (with --history-dir, resumes that session's history)")
	fs.BoolVar(&setupFlags.cluster, "cluster", false, "reach sessions hosted anywhere in the cluster of --config's [cluster] table (joins it as a client member that hosts none)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics on http://ADDR/metrics (host:port; port 0 picks a free one; the address is printed on stderr; without a host, every interface)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: musepi rpc [--config FILE [--cluster] | --provider NAME --model ID [--base-url URL]]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Serves one session as JSON lines on stdin/stdout. Without --config or")
		fmt.Fprintln(stderr, "--provider it runs against the built-in demo server (no API key needed).")
		fmt.Fprintln(stderr, "With --cluster the session is hosted by the nodes of the file's cluster")
		fmt.Fprintln(stderr, "(musepi node); --session-id reaches an existing one.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *maxLine < 0 {
		fmt.Fprintf(stderr, "musepi rpc: --max-line must be 0 (the default, %d) or more, got %d\n", rpc.DefaultMaxLine, *maxLine)
		return 2
	}
	log, err := setupFlags.logger()
	if err != nil {
		fmt.Fprintf(stderr, "musepi rpc: %v\n", err)
		return 2
	}
	var extra []musepi.Option
	if *metricsAddr != "" {
		metrics, err := serveMetrics("musepi rpc", *metricsAddr)
		if err != nil {
			fmt.Fprintf(stderr, "musepi rpc: %v\n", err)
			return 1
		}
		defer closeMetrics(metrics)
		extra = append(extra, metrics.option())
	}
	su, err := setupFlags.open(extra...)
	if err != nil {
		fmt.Fprintf(stderr, "musepi rpc: %v\n", err)
		return 1
	}
	defer shutdown(su)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A client that closes our stdout must not kill the process with
	// SIGPIPE before the history is flushed: with SIGPIPE caught, the write
	// fails with EPIPE, which the server logs and shuts down on.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	srv := &rpc.Server{
		Runtime:        su.rt,
		SessionOptions: []musepi.SessionOption{musepi.WithModel(su.model), musepi.WithSessionID(*sessionID)},
		Out:            os.Stdout,
		Log:            log,
		MaxLine:        *maxLine,
		Models:         su.models,
		HistoryDir:     su.historyDir,
	}
	if err := srv.Serve(ctx, os.Stdin); err != nil {
		fmt.Fprintf(stderr, "musepi rpc: %v\n", err)
		return 1
	}
	return 0
}

// closeMetrics stops serving metrics, giving scrapes in progress five seconds.
func closeMetrics(m *metricsServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.close(ctx); err != nil {
		fmt.Fprintf(stderr, "musepi: metrics: %v\n", err)
	}
}

// shutdown stops a setup's runtime, giving it ten seconds.
func shutdown(su *setup) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := su.shutdown(ctx); err != nil {
		fmt.Fprintf(stderr, "musepi: shutdown: %v\n", err)
	}
}
