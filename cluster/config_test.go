package cluster_test

import (
	"crypto/x509"
	"errors"
	"strings"
	"testing"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/internal/testkit/testcert"
	"github.com/musepi/musepi/retry"
)

// TestStartRejectsBadConfig: a config that cannot work is refused before
// anything starts, with an error naming what is wrong.
func TestStartRejectsBadConfig(t *testing.T) {
	ok := func() cluster.Config {
		return cluster.Config{Name: "c", Membership: cluster.Etcd(cluster.EtcdConfig{Endpoints: []string{"http://127.0.0.1:1"}})}
	}
	ca, other := testcert.NewCA(t, "cluster CA"), testcert.NewCA(t, "other CA")
	good := ca.Config(t, testcert.Cert{Name: "node"})
	badBudget := retry.DefaultBudgetSettings()
	badBudget.Enabled, badBudget.MaxTokens = true, -1
	for _, tc := range []struct {
		name   string
		change func(*cluster.Config)
		want   string
	}{
		{"no name", func(c *cluster.Config) { c.Name = "" }, "is empty"},
		{"name with a slash", func(c *cluster.Config) { c.Name = "a/b" }, "has a '/'"},
		{"no membership", func(c *cluster.Config) { c.Membership = cluster.Membership{} }, "no Membership"},
		{"port out of range", func(c *cluster.Config) { c.Port = 70000 }, "Port 70000"},
		{"negative timeout", func(c *cluster.Config) { c.RequestTimeout = -1 }, "negative"},
		{"provider without name", func(c *cluster.Config) { c.Providers = []cluster.Provider{{}} }, "no name"},
		{"provider twice", func(c *cluster.Config) { c.Providers = []cluster.Provider{{Name: "p"}, {Name: "p"}} }, `"p" twice`},
		{"credential names repeat", func(c *cluster.Config) {
			c.Providers = []cluster.Provider{{Name: "p", Credentials: []actors.Credential{{Name: "A"}, {Name: "A"}}}}
		}, "unique"},
		{"bad budget", func(c *cluster.Config) { c.Providers = []cluster.Provider{{Name: "p", Budget: badBudget}} }, "maxTokens"},
		{"empty chain", func(c *cluster.Config) { c.FallbackChains = map[string][]string{"default": nil} }, "empty"},
		{"automanaged without port", func(c *cluster.Config) {
			c.Membership = cluster.Automanaged(cluster.AutomanagedConfig{Peers: []string{"127.0.0.1:1"}})
		}, "automanaged needs"},
		{"etcd without endpoints", func(c *cluster.Config) { c.Membership = cluster.Etcd(cluster.EtcdConfig{}) }, "etcd needs"},
		{"every interface without TLS", func(c *cluster.Config) { c.Host = "0.0.0.0" }, `Host "0.0.0.0" is not a loopback address and there is no TLS`},
		{"a host name without TLS", func(c *cluster.Config) { c.Host = "node1.internal" }, "not a loopback address"},
		{"TLS and Insecure", func(c *cluster.Config) { c.TLS, c.Insecure = good, true }, "TLS and Insecure are both set"},
		{"TLS without a certificate", func(c *cluster.Config) {
			c.TLS = good.Clone()
			c.TLS.Certificates = nil
		}, "no certificate"},
		{"TLS without RootCAs", func(c *cluster.Config) {
			c.TLS = good.Clone()
			c.TLS.RootCAs = nil
		}, "no RootCAs"},
		{"TLS without ClientCAs", func(c *cluster.Config) {
			c.TLS = good.Clone()
			c.TLS.ClientCAs = nil
		}, "no ClientCAs"},
		{"a certificate of another CA", func(c *cluster.Config) {
			c.TLS = good.Clone()
			c.TLS.Certificates = other.Config(t, testcert.Cert{Name: "node"}).Certificates
		}, "does not verify as a server"},
		{"a server-only certificate", func(c *cluster.Config) {
			c.TLS = ca.Config(t, testcert.Cert{Name: "node", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		}, "does not verify as a client"},
		{"a certificate for another address", func(c *cluster.Config) {
			c.TLS = ca.Config(t, testcert.Cert{Name: "node", Hosts: []string{"10.0.0.1"}})
			c.Host, c.AdvertiseHost = "0.0.0.0", "10.0.0.2:7001"
		}, "is not valid for 10.0.0.2, the name the other members verify"},
		{"a certificate without ServerName", func(c *cluster.Config) {
			c.TLS = good.Clone()
			c.TLS.ServerName = "musepi-node"
		}, "is not valid for musepi-node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok()
			tc.change(&cfg)
			m, err := cluster.Start(cfg)
			if err == nil {
				_ = m.Leave()
				t.Fatalf("Start accepted the config")
			}
			if !errors.Is(err, cluster.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v; want ErrConfig mentioning %q", err, tc.want)
			}
		})
	}
}
