package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"go.uber.org/goleak"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/provider"
)

// TestStartPortInUse: a node whose port is taken fails to start with an
// error naming the address, within a second, and leaves no goroutine
// behind (protoactor's remote panics when it cannot listen, before its
// gRPC server exists).
func TestStartPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	cfg := settings(clusterName(t), cluster.InProcess(test.NewInMemAgent()))
	cfg.Port = port
	start := time.Now()
	m, err := cluster.Start(cfg)
	if err == nil {
		_ = m.Leave()
		t.Fatal("Start succeeded on a port in use")
	}
	took := time.Since(start)
	if want := ln.Addr().String() + ": bind: address already in use"; !strings.Contains(err.Error(), want) || took > time.Second {
		t.Errorf("Start = %v after %s; want an error with %q within 1 s", err, took, want)
	}
	goleak.VerifyNone(t, leakyDependencies...)
}

// TestStartChecksTheAdvertisedAddress: a node that cannot connect to its
// own advertised address is refused before it registers, saying so, and
// leaves no goroutine behind; one that can starts.
func TestStartChecksTheAdvertisedAddress(t *testing.T) {
	port := freePort(t)
	closed := freePort(t) // nobody listens there
	for _, tc := range []struct {
		name      string
		advertise string
		want      string // in the error; "" for a start
	}{
		{"reachable", fmt.Sprintf("localhost:%d", port), ""},
		{"refused", fmt.Sprintf("127.0.0.1:%d", closed), fmt.Sprintf("cannot connect to its own advertised address 127.0.0.1:%d", closed)},
		{"no such host", "no-such-host.invalid:7001", "cannot connect to its own advertised address no-such-host.invalid:7001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agent := test.NewInMemAgent()
			cfg := settings(clusterName(t), cluster.InProcess(agent))
			cfg.Port, cfg.AdvertiseHost = port, tc.advertise
			m, err := cluster.Start(cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Start: %v", err)
			case tc.want == "":
				if got := m.Address(); got != tc.advertise {
					t.Errorf("Address() = %q, want %q", got, tc.advertise)
				}
				if err := m.Leave(); err != nil {
					t.Fatal(err)
				}
			case err == nil:
				_ = m.Leave()
				t.Fatal("Start succeeded")
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Start: %v; want an error with %q", err, tc.want)
			default:
				t.Logf("refused: %v", err)
				if members := agent.GetStatusHealth(); len(members) != 0 {
					t.Errorf("the refused node registered: %v", members)
				}
				goleak.VerifyNone(t, leakyDependencies...)
			}
		})
	}
}

// TestJoinClusterStopsAtItsContext: a context that ends during
// protoactor's start (which takes none, and lasts about a second) makes
// Join leave again and fail with the context's error: the node is
// not left registered, and no goroutine is left.
func TestJoinClusterStopsAtItsContext(t *testing.T) {
	url := pgtest.Start(t).NewDatabase(t)
	leaks := append(slices.Clone(leakyDependencies), goleak.IgnoreCurrent())
	store, err := pgstore.Connect(context.Background(), url, pgstore.WithNode("node"))
	if err != nil {
		t.Fatal(err)
	}
	agent := test.NewInMemAgent()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	rt, err := cluster.Join(ctx, cluster.JoinConfig{Name: clusterName(t), Membership: cluster.InProcess(agent), Store: store},
		musepi.WithProvider("p", provider.NewScripted()))
	took := time.Since(start)
	if err == nil {
		_ = rt.Shutdown(context.Background())
		t.Fatalf("Join succeeded after %s with a context of 300 ms", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Join = %v; want the context's error", err)
	}
	if members := agent.GetStatusHealth(); len(members) != 0 {
		t.Errorf("the node is still registered: %v", members)
	}
	t.Logf("Join returned %s after it began (the context ended at 300 ms): %v", took.Round(time.Millisecond), err)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, leaks...)
}
