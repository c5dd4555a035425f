package examples

import (
	"fmt"
	"testing"

	"github.com/musepi/musepi/config/clustercfg"
	"github.com/musepi/musepi/provider/fakellm"
)

// The 3-node cluster of docs/cluster.md and the README: its three files
// are valid, name one cluster, and differ in port and node name; its
// scenario loads.
func TestClusterExampleFiles(t *testing.T) {
	t.Setenv("FAKE_KEY_A", "key-a")
	t.Setenv("FAKE_KEY_B", "key-b")
	ports, names := map[int]bool{}, map[string]bool{}
	for i := 1; i <= 3; i++ {
		path := fmt.Sprintf("cluster/node%d.toml", i)
		cfg, err := clustercfg.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		c := cfg.Cluster
		if c == nil || c.Name != "dev" || ports[c.Port] || names[c.NodeName] {
			t.Errorf("%s: cluster %+v: want cluster dev, a port and a node name of its own", path, c)
			continue
		}
		ports[c.Port], names[c.NodeName] = true, true
	}
	if _, err := fakellm.LoadScenario("cluster/scenario.json"); err != nil {
		t.Error(err)
	}
}
