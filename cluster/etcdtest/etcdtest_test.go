package etcdtest_test

import (
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musepi/musepi/cluster/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartServesAndStopEnds(t *testing.T) {
	s := etcdtest.Start(t)
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(s.Endpoint() + "/health")
	if err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health: %s", resp.Status)
	}
	client.CloseIdleConnections()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := client.Get(s.Endpoint() + "/health"); err == nil {
		t.Fatal("etcd still answers after Stop")
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}
