package cluster_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/retry"
)

// TestStartRejectsBadConfig: a config that cannot work is refused before
// anything starts, with an error naming what is wrong.
func TestStartRejectsBadConfig(t *testing.T) {
	ok := func() cluster.Config {
		return cluster.Config{Name: "c", Membership: cluster.Etcd(cluster.EtcdConfig{Endpoints: []string{"http://127.0.0.1:1"}})}
	}
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
