package cluster_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"go.uber.org/goleak"

	"github.com/musepi/musepi/cluster"
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
