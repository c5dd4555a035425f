// Package clustercfg reads the keys of MusePi's configuration file whose
// runtime needs the cluster packages (and so links PostgreSQL's driver,
// etcd's client and gRPC): the "cluster" table, how `musepi node` joins a
// cluster and `musepi rpc --cluster` reaches it, and history_database,
// a single runtime's histories in PostgreSQL (cluster/pgstore). Package
// config reads the rest of the file, and this package hands it these keys
// as a config.Extension; ../README.md documents every key.
//
//	cfg, err := clustercfg.Load("musepi.toml") // the whole file, as config.Load checks it
//	rt, err := cfg.Join(ctx, false, "", log)  // a node of the [cluster] table's cluster
//	rt, err := cfg.NewRuntime()               // or a runtime, connected to history_database
package clustercfg

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/musepi/musepi/config"
)

// Config is a configuration file with the keys this package reads. Load
// and Parse return it validated; the embedded config.Config's Validate
// checks these keys too.
type Config struct {
	*config.Config
	// HistoryDatabase ("history_database") is a PostgreSQL URL
	// ("postgres://user@host:5432/db?sslmode=disable"): session histories,
	// with their retry chains' records (durable retry chains) and durable
	// timers, are kept in that database (cluster/pgstore), which
	// NewRuntime connects to. Exclusive with history_dir and history_sync.
	// Default "": not used.
	HistoryDatabase string
	// HistoryLease ("history_lease_ms") is how long this process's hold on
	// its sessions in history_database outlives it when it dies without
	// closing them (killed): another process opens them once it ran out.
	// Left out (0): DefaultHistoryLease (15 s); else at least 100 ms. Only
	// with history_database.
	HistoryLease time.Duration
	// Cluster ("cluster") is how this runtime joins a cluster (see
	// Cluster); nil when the file has no [cluster] table.
	Cluster *Cluster
}

// Parse decodes and validates a configuration, as config.Parse does.
func Parse(data []byte) (*Config, error) {
	c, k := newConfig(false)
	base, err := config.ParseWith(data, k)
	return c.with(base, k, err)
}

// Load reads, decodes and validates the configuration file at path, as
// config.Load does. The [cluster] table it returns keeps the etcd
// client's TLS that validation read, for EtcdConfig.
func Load(path string) (*Config, error) {
	c, k := newConfig(false)
	base, err := config.LoadWith(path, k)
	return c.with(base, k, err)
}

// LoadCluster reads and decodes the configuration file at path and
// validates its [cluster] table only, as Load does, its TLS files read:
// for the commands that read a cluster's state (musepi cluster status,
// sessions, history show), which call no provider and so need neither the
// providers' checks nor the environment variables holding their keys. It
// returns the table, which carries the etcd client's TLS for EtcdConfig.
// A file without a [cluster] table fails.
func LoadCluster(path string) (*Cluster, error) {
	c, k := newConfig(true)
	base, err := config.LoadExtension(path, k)
	if c, err = c.with(base, k, err); err != nil {
		return nil, err
	}
	if c.Cluster == nil {
		return nil, fmt.Errorf("%s has no [cluster] table (see config/README.md)", path)
	}
	return c.Cluster, nil
}

// newConfig is an empty Config and the extension that decodes into it;
// clusterOnly checks the [cluster] table only.
func newConfig(clusterOnly bool) (*Config, *keys) {
	c := &Config{}
	return c, &keys{c: c, clusterOnly: clusterOnly}
}

// with finishes a load with k that returned base and err: c with base,
// its [cluster] table given the etcd client's TLS that the load's check
// read.
func (c *Config) with(base *config.Config, k *keys, err error) (*Config, error) {
	if err != nil {
		return nil, err
	}
	c.Config = base
	if c.Cluster != nil {
		c.Cluster.etcdTLS = k.first.etcdTLS
	}
	return c, nil
}

// keys is the config.Extension of a Config: it decodes the keys this
// package reads into c, and checks them.
type keys struct {
	c           *Config
	clusterOnly bool // LoadCluster's: history_database is not checked
	// first is what the first check read, the load's: later checks
	// (Validate, RuntimeOptions), which may run at once, only read it.
	first *loaded
}

// Decode reads history_database, history_lease_ms and the [cluster]
// table, keys left out at their defaults.
func (k *keys) Decode(t *config.Table) {
	t.Str("history_database", &k.c.HistoryDatabase)
	t.Millis("history_lease_ms", &k.c.HistoryLease)
	if ct, ok := t.Sub("cluster"); ok {
		k.c.Cluster = decodeCluster(ct)
	}
}

// Check validates the keys, with base the rest of the file.
func (k *keys) Check(base *config.Config) []config.Problem {
	ld, probs := k.check(base)
	if k.first == nil {
		k.first = ld
	}
	return probs
}

// check validates the keys and returns, when they are valid, what it
// read.
func (k *keys) check(base *config.Config) (*loaded, []config.Problem) {
	v := &validator{base: base, c: k.c, loaded: &loaded{}}
	if !k.clusterOnly {
		v.database()
	}
	if k.c.Cluster != nil {
		v.cluster(k.c.Cluster)
	}
	return v.loaded, v.probs
}

// loaded is what check reads while it validates: the TLS configurations
// of [cluster.tls] and [cluster.etcd.tls] (nil without the table).
type loaded struct {
	clusterTLS, etcdTLS *tls.Config
}

// validator collects the problems of c's keys, and in loaded what its
// checks read; base is the rest of the file.
type validator struct {
	base   *config.Config
	c      *Config
	loaded *loaded
	probs  []config.Problem
}

func (v *validator) add(key, format string, args ...any) {
	v.probs = append(v.probs, config.Problem{Key: key, Message: fmt.Sprintf(format, args...)})
}

// check adds err, unless it is nil, as a problem of key, and reports
// whether it was nil.
func (v *validator) check(key string, err error) bool {
	if err != nil {
		v.add(key, "%v", err)
	}
	return err == nil
}
