// Command swarm is a cluster client for tests: it joins the cluster of a
// node's configuration file as `musepi rpc --cluster` does, opens
// -sessions sessions named PREFIX-0000, PREFIX-0001, ..., sends each one
// prompt ("PREFIX prompt ID"), and prints one JSON line per prompt as it
// ends:
//
//	{"session":"chaos-0007","ok":true,"at_ms":1733307701234}
//	{"session":"chaos-0008","ok":false,"error":"...","at_ms":1733307701240}
//
// at_ms is when it ended (Unix milliseconds). A prompt still running at
// -timeout ends with ok false and the context's error. It runs in a
// process of its own so that the test driving it holds no cluster member.
//
// It is part of the test kit (internal/testkit): cmd/musepi's chaos test
// runs it, built by internal/testkit/testbin.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/config/clustercfg"
)

// outcome is how one prompt ended: a line of the output.
type outcome struct {
	Session string `json:"session"`
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
	AtMs    int64  `json:"at_ms"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "swarm:", err)
		os.Exit(1)
	}
}

func run() error {
	file := flag.String("config", "", "a node's configuration file (its [cluster] table)")
	sessions := flag.Int("sessions", 100, "how many sessions, one prompt each")
	prefix := flag.String("prefix", "swarm", "the sessions' id prefix")
	timeout := flag.Duration("timeout", 5*time.Minute, "when prompts still running give up")
	flag.Parse()
	cfg, err := clustercfg.Load(*file)
	if err != nil {
		return err
	}
	ctx := context.Background()
	rt, err := cfg.Join(ctx, true, "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = rt.Shutdown(sctx)
	}()
	promptCtx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var mu sync.Mutex // guards enc and werr
	enc := json.NewEncoder(os.Stdout)
	var werr error
	opening := make(chan struct{}, 32) // sessions opening at once
	var wg sync.WaitGroup
	for i := range *sessions {
		id := fmt.Sprintf("%s-%04d", *prefix, i)
		wg.Go(func() {
			opening <- struct{}{}
			s, err := rt.NewSession(promptCtx, musepi.WithSessionID(id), musepi.WithModel(cfg.DefaultModel))
			<-opening
			if err == nil {
				_, err = s.Prompt(promptCtx, *prefix+" prompt "+id)
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_ = s.Close(cctx)
				cancel()
			}
			o := outcome{Session: id, OK: err == nil, AtMs: time.Now().UnixMilli()}
			if err != nil {
				o.Error = err.Error()
			}
			mu.Lock()
			defer mu.Unlock()
			if err := enc.Encode(o); err != nil && werr == nil {
				werr = fmt.Errorf("write the outcome of %s: %w", id, err)
			}
		})
	}
	wg.Wait()
	return werr
}
