package examples

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/musepi/musepi/config/clustercfg"
)

// The cluster recipe (docs/cluster.md) on other ports, for when system
// services hold 2379 and 5432: its sed line
// (`s/:2379/:12379/; s/:5432/:15432/`, the first match of each line)
// moves each node file's etcd endpoint and database to the new ports and
// changes nothing else.
func TestClusterExampleFilesOnOtherPorts(t *testing.T) {
	t.Setenv("FAKE_KEY_A", "key-a")
	t.Setenv("FAKE_KEY_B", "key-b")
	for i := 1; i <= 3; i++ {
		path := fmt.Sprintf("cluster/node%d.toml", i)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		for j, line := range lines {
			line = strings.Replace(line, ":2379", ":12379", 1)
			lines[j] = strings.Replace(line, ":5432", ":15432", 1)
		}
		moved := strings.Join(lines, "\n")
		if n := len(moved) - len(data); n != 2 {
			t.Errorf("%s: the substitution changed %d ports; want 2 (etcd's and the database's)", path, n)
		}
		cfg, err := clustercfg.Parse([]byte(moved))
		if err != nil {
			t.Fatalf("%s on other ports: %v", path, err)
		}
		c := cfg.Cluster
		if !slices.Equal(c.Etcd.Endpoints, []string{"http://127.0.0.1:12379"}) || !strings.Contains(c.Database(), "@127.0.0.1:15432/") {
			t.Errorf("%s on other ports: etcd %v, database %s; want 12379 and 15432", path, c.Etcd.Endpoints, c.Database())
		}
	}
}
