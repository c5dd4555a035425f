package etcdtest_test

import (
	"io"
	"net/http"
	"strings"
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

func TestHaltAndRestartKeepTheData(t *testing.T) {
	s := etcdtest.Start(t)
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	put := `{"key":"a2V5","value":"dmFsdWU="}` // "key" = "value", base64 as the v3 JSON API wants
	if resp, err := client.Post(s.Endpoint()+"/v3/kv/put", "application/json", strings.NewReader(put)); err != nil {
		t.Fatalf("put: %v", err)
	} else {
		resp.Body.Close()
	}
	s.Halt()
	client.CloseIdleConnections()
	if _, err := client.Get(s.Endpoint() + "/health"); err == nil {
		t.Fatal("etcd still answers after Halt")
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	resp, err := client.Post(s.Endpoint()+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"a2V5"}`))
	if err != nil {
		t.Fatalf("range: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `"value":"dmFsdWU="`) {
		t.Fatalf("after Restart the key reads %s; want its value kept", body)
	}
}
