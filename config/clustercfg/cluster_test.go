package clustercfg

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/cluster"
)

// etcdCluster is a valid [cluster] table with etcd membership that the
// cases change.
const etcdCluster = `[cluster]
name = "dev"
port = 7001
membership = "etcd"
database_url = "postgres://musepi@127.0.0.1:5432/musepi?sslmode=disable"
[cluster.etcd]
endpoints = ["http://127.0.0.1:2379"]
`

// automanagedCluster is a valid [cluster] table with automanaged
// membership.
const automanagedCluster = `[cluster]
name = "dev"
port = 7001
membership = "automanaged"
database_url = "postgres://musepi@127.0.0.1:5432/musepi"
[cluster.automanaged]
port = 6331
peers = ["127.0.0.1:6331", "127.0.0.1:6332"]
`

func TestClusterTable(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	t.Run("etcd, keys left out at their defaults", func(t *testing.T) {
		cfg, err := Parse([]byte(doc("", "", etcdCluster)))
		if err != nil {
			t.Fatal(err)
		}
		want := &Cluster{Name: "dev", Host: "127.0.0.1", Port: 7001, Membership: "etcd",
			DatabaseURL: "postgres://musepi@127.0.0.1:5432/musepi?sslmode=disable",
			Lease:       15 * time.Second, HandoverTimeout: cluster.DefaultHandoverTimeout, LeaveTimeout: 30 * time.Second,
			WriteRetry:  30 * time.Second,
			Etcd:        ClusterEtcd{Endpoints: []string{"http://127.0.0.1:2379"}, Prefix: "/musepi", DialTimeout: 5 * time.Second},
			Automanaged: ClusterAutomanaged{Refresh: time.Second}}
		if !reflect.DeepEqual(cfg.Cluster, want) {
			t.Errorf("cluster\n%+v, want\n%+v", cfg.Cluster, want)
		}
		if got := cfg.Cluster.Database(); got != want.DatabaseURL {
			t.Errorf("Database() = %q", got)
		}
	})
	t.Run("automanaged, every key set", func(t *testing.T) {
		t.Setenv("MUSEPI_TEST_DB", " postgres://musepi:secret@db.internal:5432/musepi ")
		src := `[cluster]
name = "prod"
host = "0.0.0.0"
port = 7002
advertise_address = "203.0.113.7:17002"
membership = "automanaged"
database_url_env = "MUSEPI_TEST_DB"
node_name = "node-2"
lease_ms = 5000
handover_timeout_ms = 5000
leave_timeout_ms = 20000
write_retry_ms = 0
insecure = true
[cluster.automanaged]
host = "10.0.0.2"
port = 6332
peers = ["10.0.0.1:6331", "10.0.0.2:6332"]
refresh_ms = 500
`
		cfg, err := Parse([]byte(doc("", "", src)))
		if err != nil {
			t.Fatal(err)
		}
		c := cfg.Cluster
		want := &Cluster{Name: "prod", Host: "0.0.0.0", Port: 7002, AdvertiseAddress: "203.0.113.7:17002", Membership: "automanaged",
			DatabaseURLEnv: "MUSEPI_TEST_DB", NodeName: "node-2", Lease: 5 * time.Second, HandoverTimeout: 5 * time.Second,
			LeaveTimeout: 20 * time.Second, Insecure: true,
			Etcd:        ClusterEtcd{Prefix: "/musepi", DialTimeout: 5 * time.Second},
			Automanaged: ClusterAutomanaged{Host: "10.0.0.2", Port: 6332, Peers: []string{"10.0.0.1:6331", "10.0.0.2:6332"}, Refresh: 500 * time.Millisecond}}
		if !reflect.DeepEqual(c, want) {
			t.Errorf("cluster\n%+v, want\n%+v", c, want)
		}
		if got := c.Database(); got != "postgres://musepi:secret@db.internal:5432/musepi" {
			t.Errorf("Database() = %q, want the variable's value trimmed", got)
		}
	})
	t.Run("no [cluster] table: nil", func(t *testing.T) {
		cfg, err := Parse([]byte(doc("", "", "")))
		if err != nil || cfg.Cluster != nil {
			t.Fatalf("Parse = %+v, %v", cfg, err)
		}
	})
}

func TestClusterValidation(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	t.Setenv("MUSEPI_TEST_DB_BAD", "mysql://root:hunter2@db/musepi")
	t.Setenv("MUSEPI_TEST_DB_EMPTY", " ")
	t.Setenv("MUSEPI_TEST_DB", "postgres://musepi@127.0.0.1/musepi")
	// set replaces (or with value "" removes) key = ... in table src, or
	// appends it to src's first table.
	set := func(src, key, value string) string {
		var out []string
		done := false
		for _, line := range strings.Split(src, "\n") {
			if strings.HasPrefix(line, key+" = ") && !done {
				done = true
				if value != "" {
					out = append(out, key+" = "+value)
				}
				continue
			}
			out = append(out, line)
		}
		if !done {
			out = append([]string{out[0], key + " = " + value}, out[1:]...)
		}
		return strings.Join(out, "\n")
	}
	cases := []struct {
		name, rest string
		key, msg   string // a problem with exactly this key whose message contains msg
	}{
		{"history_dir with a cluster", etcdCluster, "history_dir", "not with a [cluster] table: the cluster keeps session histories in its database"},
		{"history_sync with a cluster", etcdCluster, "history_sync", "not with a [cluster] table"},
		{"history_database with a cluster", etcdCluster, "history_database", "not with a [cluster] table"},
		{"unknown key", set(etcdCluster, "bind", `"x"`), "cluster.bind", "unknown key (allowed: advertise_address, automanaged, database_url, database_url_env, etcd, handover_timeout_ms, host, insecure, lease_ms, leave_timeout_ms, membership, name, node_name, port, tls, write_retry_ms)"},
		{"misspelt key", set(etcdCluster, "advertiseAddress", `"x"`), "cluster.advertiseAddress", `did you mean "advertise_address"?`},
		{"a password key", set(etcdCluster, "database_password", `"hunter2"`), "cluster.database_password", "put the password in the URL held by the environment variable"},
		{"name missing", set(etcdCluster, "name", ""), "cluster.name", "required (the cluster's name, the same on every node)"},
		{"name with a slash", set(etcdCluster, "name", `"a/b"`), "cluster.name", `must not contain '/' or '@', got "a/b"`},
		{"name not a string", set(etcdCluster, "name", "1"), "cluster.name", "must be a string, got an integer"},
		{"host empty", set(etcdCluster, "host", `""`), "cluster.host", "must not be empty"},
		{"host with a port", set(etcdCluster, "host", `"127.0.0.1:7001"`), "cluster.host", `want a host name or IP address, got "127.0.0.1:7001"`},
		{"any-address host without advertise_address", set(set(etcdCluster, "host", `"0.0.0.0"`), "insecure", "true"), "cluster.advertise_address", `required when host is "0.0.0.0"`},
		{"advertise_address unspecified", set(etcdCluster, "advertise_address", `"[::]:7001"`), "cluster.advertise_address", "must be an address other nodes can reach"},
		{"advertise_address without port", set(etcdCluster, "advertise_address", `"10.0.0.2"`), "cluster.advertise_address", `want host:port, got "10.0.0.2"`},
		{"port out of range", set(etcdCluster, "port", "70000"), "cluster.port", "must be 0 to 65535, got 70000"},
		{"port negative", set(etcdCluster, "port", "-1"), "cluster.port", "must be 0 to 65535, got -1"},
		{"membership missing", set(etcdCluster, "membership", ""), "cluster.membership", `required ("etcd" or "automanaged")`},
		{"membership unknown", set(etcdCluster, "membership", `"consul"`), "cluster.membership", `unknown membership "consul" (want "etcd" or "automanaged")`},
		{"etcd without its table", strings.Split(etcdCluster, "[cluster.etcd]")[0], "cluster.etcd", `required with membership = "etcd"`},
		{"etcd endpoints empty", set(etcdCluster, "endpoints", "[]"), "cluster.etcd.endpoints", "at least one etcd client URL is required"},
		{"etcd endpoint not a URL", set(etcdCluster, "endpoints", `["127.0.0.1:2379"]`), "cluster.etcd.endpoints[0]", `want an http:// or https:// URL, got "127.0.0.1:2379"`},
		{"etcd endpoint without port", set(etcdCluster, "endpoints", `["http://127.0.0.1"]`), "cluster.etcd.endpoints[0]", "has no port"},
		{"etcd endpoints not strings", set(etcdCluster, "endpoints", "[2379]"), "cluster.etcd.endpoints[0]", "must be a string, got an integer"},
		{"etcd prefix relative", etcdCluster + "prefix = \"musepi\"\n", "cluster.etcd.prefix", `must start with "/", got "musepi"`},
		{"etcd dial timeout zero", etcdCluster + "dial_timeout_ms = 0\n", "cluster.etcd.dial_timeout_ms", "must be above 0, got 0"},
		{"etcd unknown key", etcdCluster + "peers = [\"a:1\"]\n", "cluster.etcd.peers", "unknown key (allowed: dial_timeout_ms, endpoints, prefix, tls)"},
		{"etcd with an automanaged table", etcdCluster + "[cluster.automanaged]\nport = 6331\npeers = [\"127.0.0.1:6331\"]\n", "cluster.automanaged", `only with membership = "automanaged" (membership is "etcd")`},
		{"automanaged without its table", strings.Split(automanagedCluster, "[cluster.automanaged]")[0], "cluster.automanaged", `required with membership = "automanaged"`},
		{"automanaged port missing", strings.Replace(automanagedCluster, "port = 6331\n", "", 1), "cluster.automanaged.port", "required (the port of this node's /_health endpoint"},
		{"automanaged port out of range", strings.Replace(automanagedCluster, "port = 6331", "port = 65536", 1), "cluster.automanaged.port", "must be 1 to 65535, got 65536"},
		{"automanaged port is the remote's", strings.Replace(automanagedCluster, "port = 6331", "port = 7001", 1), "cluster.automanaged.port", "7001 is also cluster.port"},
		{"automanaged peers empty", set(automanagedCluster, "peers", "[]"), "cluster.automanaged.peers", "at least one peer is required"},
		{"automanaged peer without port", set(automanagedCluster, "peers", `["127.0.0.1"]`), "cluster.automanaged.peers[0]", `want host:port, got "127.0.0.1"`},
		{"automanaged peer port zero", set(automanagedCluster, "peers", `["127.0.0.1:0"]`), "cluster.automanaged.peers[0]", `port of "127.0.0.1:0" must be 1 to 65535`},
		{"automanaged refresh negative", automanagedCluster + "refresh_ms = -5\n", "cluster.automanaged.refresh_ms", "must be above 0, got -5"},
		{"automanaged with an etcd table", automanagedCluster + "[cluster.etcd]\nendpoints = [\"http://127.0.0.1:2379\"]\n", "cluster.etcd", `only with membership = "etcd" (membership is "automanaged")`},
		{"database missing", set(etcdCluster, "database_url", ""), "cluster.database_url", "required: the PostgreSQL URL of the shared state"},
		{"database twice", set(etcdCluster, "database_url_env", `"MUSEPI_TEST_DB"`), "cluster.database_url", "give database_url or database_url_env, not both"},
		{"database not postgres", set(etcdCluster, "database_url", `"mysql://db/musepi"`), "cluster.database_url", `want a "postgres://" or "postgresql://" URL, got scheme "mysql"`},
		{"database bad parameter", set(etcdCluster, "database_url", `"postgres://db/musepi?pool_max_conns=many"`), "cluster.database_url", "cannot parse pool_max_conns"},
		{"database env unset", set(set(etcdCluster, "database_url", ""), "database_url_env", `"MUSEPI_TEST_DB_UNSET"`), "cluster.database_url_env", "environment variable MUSEPI_TEST_DB_UNSET is not set"},
		{"database env empty", set(set(etcdCluster, "database_url", ""), "database_url_env", `"MUSEPI_TEST_DB_EMPTY"`), "cluster.database_url_env", "environment variable MUSEPI_TEST_DB_EMPTY is empty"},
		{"database env not postgres (value not quoted)", set(set(etcdCluster, "database_url", ""), "database_url_env", `"MUSEPI_TEST_DB_BAD"`), "cluster.database_url_env", "environment variable MUSEPI_TEST_DB_BAD does not hold a valid postgres:// URL"},
		{"database env not a name", set(set(etcdCluster, "database_url", ""), "database_url_env", `"postgres://db"`), "cluster.database_url_env", "is not an environment variable name"},
		{"lease too short", set(etcdCluster, "lease_ms", "50"), "cluster.lease_ms", "must be at least 100, got 50"},
		{"negative write retry", set(etcdCluster, "write_retry_ms", "-1"), "cluster.write_retry_ms", "must be 0 (no retry) or more, got -1"},
		{"handover timeout zero", set(etcdCluster, "handover_timeout_ms", "0"), "cluster.handover_timeout_ms", "must be above 0, got 0"},
		{"leave timeout a string", set(etcdCluster, "leave_timeout_ms", `"30s"`), "cluster.leave_timeout_ms", "must be an integer, got a string"},
		{"leave timeout negative", set(etcdCluster, "leave_timeout_ms", "-1"), "cluster.leave_timeout_ms", "must be above 0, got -1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			top := ""
			if key, ok := strings.CutSuffix(tc.name, " with a cluster"); ok {
				top = "default_model = \"openai/gpt-4o\"\n" + map[string]string{
					"history_dir": `history_dir = "sessions"`, "history_sync": `history_sync = "entry"`,
					"history_database": `history_database = "postgres://db/x"`, "history_lease_ms": "history_lease_ms = 1000",
				}[key]
			}
			cfg, err := Parse([]byte(doc(top, "", tc.rest)))
			if err == nil {
				t.Fatalf("no error for\n%s", tc.rest)
			}
			if cfg != nil {
				t.Error("a config came back with the error")
			}
			probs := problems(t, err)
			found := false
			for _, p := range probs {
				if p.Key == tc.key && strings.Contains(p.Message, tc.msg) {
					found = true
				}
			}
			if !found {
				t.Errorf("no problem %q containing %q in\n%v", tc.key, tc.msg, err)
			}
			if len(probs) != 1 {
				t.Errorf("want only that problem, got\n%v", err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error text quotes a secret: %q", err.Error())
			}
		})
	}
}

// LoadCluster checks the [cluster] table only: a node's file whose
// providers' keys are not in the environment loads; a file without the
// table, or with a wrong one, does not.
func TestLoadCluster(t *testing.T) {
	t.Setenv(testKeyEnv, "") // the provider's key: Load needs it, LoadCluster not
	dir := t.TempDir()
	for _, tc := range []struct {
		name, src string
		want      string // the error ("": none)
	}{
		{"a node's file without its keys", doc("", "", etcdCluster), ""},
		{"no cluster table", doc("", "", ""), "FILE has no [cluster] table (see config/README.md)"},
		{"a wrong cluster table", doc("", "", strings.Replace(etcdCluster, `name = "dev"`, `name = "a/b"`, 1)),
			"FILE: cluster.name: must not contain '/' or '@', got \"a/b\""},
		{"not TOML", "[cluster\n", "FILE: invalid TOML at line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".toml")
			if err := os.WriteFile(path, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := LoadCluster(path)
			if tc.want == "" {
				if err != nil || c.Name != "dev" || c.Etcd.Prefix != DefaultEtcdPrefix {
					t.Fatalf("LoadCluster = %+v, %v; want the table with its defaults", c, err)
				}
				if _, err := Load(path); err == nil {
					t.Fatal("Load accepted a file whose provider's key is not set: the case shows nothing")
				}
				return
			}
			if want := strings.ReplaceAll(tc.want, "FILE", path); err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("LoadCluster = %v; want an error starting %q", err, want)
			}
		})
	}
}
