package etcdtest_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musepi/musepi/cluster/etcdtest"
	"github.com/musepi/musepi/internal/testkit/netnstest"
	"github.com/musepi/musepi/internal/testkit/testcert"
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

// TestTLS: WithTLS serves https and answers only clients with a
// certificate of the CA.
func TestTLS(t *testing.T) {
	ca := testcert.NewCA(t, "etcd CA")
	s := etcdtest.Start(t, etcdtest.WithTLS(ca.Issue(t, testcert.Cert{Name: "etcd"})))
	if !strings.HasPrefix(s.Endpoint(), "https://") {
		t.Fatalf("endpoint %s, want https://", s.Endpoint())
	}
	member := ca.Config(t, testcert.Cert{Name: "member"})
	noCert := member.Clone()
	noCert.Certificates = nil
	for _, tc := range []struct {
		name   string
		tls    *tls.Config // nil: plain http:// to the same port
		health bool
	}{
		{"a client certificate of the CA", member, true},
		{"no client certificate", noCert, false},
		{"plaintext", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := s.Endpoint() + "/health"
			transport := &http.Transport{TLSClientConfig: tc.tls}
			if tc.tls == nil {
				url = "http://" + strings.TrimPrefix(url, "https://")
			}
			client := &http.Client{Timeout: 5 * time.Second, Transport: transport}
			defer client.CloseIdleConnections()
			resp, err := client.Get(url)
			if err == nil {
				resp.Body.Close()
			}
			if ok := err == nil && resp.StatusCode == http.StatusOK; ok != tc.health {
				t.Errorf("GET /health: %v (%v); want healthy: %v", resp, err, tc.health)
			}
		})
	}
}

// TestInHost: InHost runs the server in a host's namespace on its
// address, which another host of the network reaches.
func TestInHost(t *testing.T) {
	n := netnstest.New(t)
	host, other := n.Add("etcd"), n.Add("client")
	ca := testcert.NewCA(t, "etcd CA")
	s := etcdtest.Start(t, etcdtest.InHost(host),
		etcdtest.WithTLS(ca.Issue(t, testcert.Cert{Name: "etcd", Hosts: []string{host.IP()}})))
	if want := "https://" + host.IP() + ":"; !strings.HasPrefix(s.Endpoint(), want) {
		t.Fatalf("endpoint %s, want %s...", s.Endpoint(), want)
	}
	transport := &http.Transport{TLSClientConfig: ca.Config(t, testcert.Cert{Name: "member"}), DialContext: other.DialContext}
	client := &http.Client{Timeout: 5 * time.Second, Transport: transport}
	defer client.CloseIdleConnections()
	resp, err := client.Get(s.Endpoint() + "/health")
	if err != nil {
		t.Fatalf("GET /health from another host: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health from another host: %s", resp.Status)
	}
}
