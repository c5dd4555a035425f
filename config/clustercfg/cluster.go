package clustercfg

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/config"
	"github.com/musepi/musepi/internal/plaintext"
)

// Membership kinds of "[cluster] membership".
const (
	MembershipEtcd        = "etcd"
	MembershipAutomanaged = "automanaged"
)

// Defaults of the [cluster] table's optional keys.
const (
	DefaultClusterHost  = "127.0.0.1"
	DefaultLease        = 15 * time.Second
	DefaultLeaveTimeout = 30 * time.Second
	DefaultEtcdPrefix   = "/musepi"
	DefaultEtcdDial     = 5 * time.Second
	DefaultPeersRefresh = time.Second
)

// Cluster is the "[cluster]" table: how `musepi node` joins a cluster and
// `musepi rpc --cluster` reaches it. Parse fills in the defaults of the
// keys left out.
type Cluster struct {
	// Name ("name") is the cluster's name, the same on every node.
	// Required; no '/' or '@'.
	Name string
	// Host ("host") is the address the node's gRPC remote binds to;
	// default DefaultClusterHost (loopback). "0.0.0.0" or "::" bind every
	// interface and then need AdvertiseAddress. A host that is not a
	// loopback address needs TLS, or Insecure.
	Host string
	// Port ("port") is the gRPC remote's port; 0 (the default) picks a
	// free one, which the membership service advertises.
	Port int
	// AdvertiseAddress ("advertise_address") is the host:port other nodes
	// reach this one at; default Host:Port.
	AdvertiseAddress string
	// TLS ("[cluster.tls]") is the mutual TLS of the node's gRPC remote:
	// the cluster CA, which signs every member's certificate, and this
	// node's certificate and key. nil without the table: plaintext.
	TLS *TLSFiles
	// Insecure ("insecure") lets a node without TLS bind a host that is
	// not a loopback address. Default false.
	Insecure bool
	// Membership ("membership") is how nodes find each other:
	// MembershipEtcd (with Etcd) or MembershipAutomanaged (with
	// Automanaged). Required.
	Membership string
	// Etcd ("[cluster.etcd]") configures the etcd membership.
	Etcd ClusterEtcd
	// Automanaged ("[cluster.automanaged]") configures the automanaged
	// membership.
	Automanaged ClusterAutomanaged
	// DatabaseURL ("database_url") is the PostgreSQL URL of the shared
	// state; DatabaseURLEnv ("database_url_env") names an environment
	// variable holding it instead (for a URL with a password). Exactly
	// one is required.
	DatabaseURL    string
	DatabaseURLEnv string
	// NodeName ("node_name") names the node in the database's tables;
	// default: the host name.
	NodeName string
	// Lease ("lease_ms") is how long the node's database lease lasts
	// without renewal: a node dead this long frees its sessions. Default
	// DefaultLease.
	Lease time.Duration
	// HandoverTimeout ("handover_timeout_ms") bounds how long a session
	// that moves waits for its turn in flight, and how long its new
	// activation waits for the old one to let go of its history; default
	// cluster.DefaultHandoverTimeout.
	HandoverTimeout time.Duration
	// LeaveTimeout ("leave_timeout_ms") bounds a graceful leave (SIGTERM):
	// handing the node's sessions over and leaving the membership. Default
	// DefaultLeaveTimeout.
	LeaveTimeout time.Duration
	// WriteRetry ("write_retry_ms") is how long a history write that meets
	// a transient database error (a restart, a broken connection) is tried
	// again before its prompt fails; 0: never. Default
	// pgstore.DefaultWriteRetry.
	WriteRetry time.Duration

	// etcdTLS is the etcd client's TLS, read from Etcd.TLS's files when
	// the file was loaded (nil without [cluster.etcd.tls]): EtcdConfig's.
	etcdTLS *tls.Config
}

// ClusterEtcd is the "[cluster.etcd]" table.
type ClusterEtcd struct {
	// Endpoints ("endpoints") are etcd's client URLs. Required.
	Endpoints []string
	// Prefix ("prefix") is the key prefix of the members; default
	// DefaultEtcdPrefix.
	Prefix string
	// DialTimeout ("dial_timeout_ms") bounds connecting to etcd; default
	// DefaultEtcdDial.
	DialTimeout time.Duration
	// TLS ("[cluster.etcd.tls]") is the etcd client's TLS, for https://
	// endpoints: the CA of etcd's server certificate, and a client
	// certificate if etcd asks for one. nil without the table (https://
	// endpoints are then verified with the system's CAs).
	TLS *TLSFiles
}

// ClusterAutomanaged is the "[cluster.automanaged]" table.
type ClusterAutomanaged struct {
	// Host ("host") and Port ("port") are where this node serves its
	// /_health endpoint; Host defaults to the cluster's host, Port is
	// required.
	Host string
	Port int
	// Peers ("peers") are every node's endpoint as host:port, this one's
	// included. Required.
	Peers []string
	// Refresh ("refresh_ms") is how often the peers are polled; default
	// DefaultPeersRefresh.
	Refresh time.Duration
}

// decodeCluster reads the [cluster] table, keys left out at their
// defaults.
func decodeCluster(t *config.Table) *Cluster {
	c := &Cluster{Host: DefaultClusterHost, Lease: DefaultLease, LeaveTimeout: DefaultLeaveTimeout,
		HandoverTimeout: cluster.DefaultHandoverTimeout, WriteRetry: pgstore.DefaultWriteRetry,
		Etcd:        ClusterEtcd{Prefix: DefaultEtcdPrefix, DialTimeout: DefaultEtcdDial},
		Automanaged: ClusterAutomanaged{Refresh: DefaultPeersRefresh}}
	t.Str("name", &c.Name)
	t.Str("host", &c.Host)
	t.Count("port", &c.Port)
	t.Str("advertise_address", &c.AdvertiseAddress)
	t.Str("membership", &c.Membership)
	t.Str("database_url", &c.DatabaseURL)
	t.Str("database_url_env", &c.DatabaseURLEnv)
	t.Str("node_name", &c.NodeName)
	t.Millis("lease_ms", &c.Lease)
	t.Millis("handover_timeout_ms", &c.HandoverTimeout)
	t.Millis("leave_timeout_ms", &c.LeaveTimeout)
	t.Millis("write_retry_ms", &c.WriteRetry)
	t.Bool("insecure", &c.Insecure)
	if tt, ok := t.Sub("tls"); ok {
		c.TLS = decodeTLS(tt)
	}
	if et, ok := t.Sub("etcd"); ok {
		c.Etcd.Endpoints = []string{} // present: checked even when empty
		et.Strs("endpoints", &c.Etcd.Endpoints)
		et.Str("prefix", &c.Etcd.Prefix)
		et.Millis("dial_timeout_ms", &c.Etcd.DialTimeout)
		if tt, ok := et.Sub("tls"); ok {
			c.Etcd.TLS = decodeTLS(tt)
		}
		et.Done(nil)
	}
	if at, ok := t.Sub("automanaged"); ok {
		c.Automanaged.Peers = []string{}
		at.Str("host", &c.Automanaged.Host)
		at.Count("port", &c.Automanaged.Port)
		at.Strs("peers", &c.Automanaged.Peers)
		at.Millis("refresh_ms", &c.Automanaged.Refresh)
		at.Done(nil)
	}
	t.Done(map[string]string{
		"database_password": "unknown key: put the password in the URL held by the environment variable database_url_env names",
	})
	return c
}

// cluster checks the [cluster] table.
func (v *validator) cluster(c *Cluster) {
	const at = "cluster"
	v.clusterName(c.Name)
	hostOK := v.host(at+".host", c.Host)
	dialed := v.advertised(c)
	v.port(at+".port", c.Port, true)
	v.clusterTLS(c, hostOK, dialed)
	v.clusterMembership(c)
	v.clusterDatabase(c)
	v.noLocalHistory()
	if c.NodeName != "" {
		v.check(at+".node_name", plaintext.Check("node name", c.NodeName))
	}
	v.clusterTimeouts(c)
}

// clusterName checks the cluster's name: required, without '/' or '@'.
func (v *validator) clusterName(name string) {
	const key = "cluster.name"
	switch {
	case strings.TrimSpace(name) == "":
		v.add(key, "required (the cluster's name, the same on every node)")
	case strings.ContainsAny(name, "/@"):
		v.add(key, "must not contain '/' or '@', got %q", name)
	default:
		v.check(key, plaintext.Check("cluster name", name))
	}
}

// advertised checks advertise_address and returns the host the other
// members dial, and check the certificate against ("" when unknown).
func (v *validator) advertised(c *Cluster) string {
	const key = "cluster.advertise_address"
	if c.AdvertiseAddress == "" {
		if ip := net.ParseIP(c.Host); ip != nil && ip.IsUnspecified() {
			v.add(key, "required when host is %q (other nodes cannot reach that address)", c.Host)
			return ""
		}
		return c.Host
	}
	host, ok := v.hostPort(key, c.AdvertiseAddress)
	if !ok {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		v.add(key, "must be an address other nodes can reach, not %q", c.AdvertiseAddress)
		return ""
	}
	return host
}

// clusterMembership checks membership and the table of the kind it names.
func (v *validator) clusterMembership(c *Cluster) {
	switch c.Membership {
	case MembershipEtcd:
		v.etcd(c)
	case MembershipAutomanaged:
		v.automanaged(c)
	case "":
		v.add("cluster.membership", `required ("etcd" or "automanaged")`)
	default:
		v.add("cluster.membership", `unknown membership %q (want "etcd" or "automanaged")`, c.Membership)
	}
}

// noLocalHistory reports the top-level history keys, which a [cluster]
// table replaces with its database.
func (v *validator) noLocalHistory() {
	for key, set := range map[string]bool{"history_dir": v.base.HistoryDir != "", "history_sync": v.base.HistorySync != "",
		"history_database": v.c.HistoryDatabase != "", "history_lease_ms": v.c.HistoryLease != 0} {
		if set {
			v.add(key, "not with a [cluster] table: the cluster keeps session histories in its database (cluster.database_url, cluster.lease_ms)")
		}
	}
}

// clusterTimeouts checks lease_ms, handover_timeout_ms, leave_timeout_ms
// and write_retry_ms.
func (v *validator) clusterTimeouts(c *Cluster) {
	const at = "cluster"
	if c.Lease < pgstore.MinLease {
		v.add(at+".lease_ms", "must be at least %d, got %d", pgstore.MinLease.Milliseconds(), c.Lease.Milliseconds())
	}
	if c.HandoverTimeout <= 0 {
		v.add(at+".handover_timeout_ms", "must be above 0, got %d", c.HandoverTimeout.Milliseconds())
	}
	if c.LeaveTimeout <= 0 {
		v.add(at+".leave_timeout_ms", "must be above 0, got %d", c.LeaveTimeout.Milliseconds())
	}
	if c.WriteRetry < 0 {
		v.add(at+".write_retry_ms", "must be 0 (no retry) or more, got %d", c.WriteRetry.Milliseconds())
	}
}

// etcd checks the etcd membership, and that no automanaged table is
// given with it.
func (v *validator) etcd(c *Cluster) {
	const at = "cluster.etcd"
	if c.Automanaged.Peers != nil {
		v.add("cluster.automanaged", `only with membership = "automanaged" (membership is "etcd")`)
	}
	if c.Etcd.Endpoints == nil {
		v.add(at, `required with membership = "etcd" (a [cluster.etcd] table with endpoints)`)
		return
	}
	if len(c.Etcd.Endpoints) == 0 {
		v.add(at+".endpoints", `at least one etcd client URL is required ("http://127.0.0.1:2379")`)
	}
	for i, e := range c.Etcd.Endpoints {
		key := fmt.Sprintf("%s.endpoints[%d]", at, i)
		if err := config.CheckBaseURL(e); err != nil {
			v.add(key, "%v", err)
		} else if u, _ := url.Parse(e); u.Port() == "" {
			v.add(key, "URL %q has no port (etcd's client port is usually 2379)", e)
		}
	}
	if !strings.HasPrefix(c.Etcd.Prefix, "/") {
		v.add(at+".prefix", `must start with "/", got %q`, c.Etcd.Prefix)
	}
	if c.Etcd.DialTimeout <= 0 {
		v.add(at+".dial_timeout_ms", "must be above 0, got %d", c.Etcd.DialTimeout.Milliseconds())
	}
	if c.Etcd.TLS == nil {
		return
	}
	v.loaded.etcdTLS = v.loadTLS(tlsTable{at: at + ".tls", ca: "the CA that signed etcd's server certificate"}, c.Etcd.TLS)
	for i, e := range c.Etcd.Endpoints {
		if u, err := url.Parse(e); err == nil && u.Scheme == "http" {
			v.add(fmt.Sprintf("%s.endpoints[%d]", at, i), "want an https:// URL with [cluster.etcd.tls] (the etcd client sends http:// in plaintext), got %q", e)
		}
	}
}

// clusterTLS checks [cluster.tls] and insecure: a node without TLS binds
// a loopback host only, unless insecure; with TLS, its certificate must
// verify against the CA and be valid for dialed, the host the other
// members dial ("" when unknown).
func (v *validator) clusterTLS(c *Cluster, hostOK bool, dialed string) {
	switch {
	case c.TLS != nil && c.Insecure:
		v.add("cluster.insecure", "not with a [cluster.tls] table: insecure only lets a node without TLS bind a host that is not a loopback address")
	case c.TLS != nil:
		cfg := v.loadTLS(tlsTable{at: "cluster.tls", ca: "the cluster CA, which signs every member's certificate", mutual: true}, c.TLS)
		if cfg == nil {
			return
		}
		if err := cluster.CheckTLS(cfg, dialed); err != nil {
			v.add("cluster.tls.cert_file", "%v", err)
			return
		}
		v.loaded.clusterTLS = cfg
	case hostOK && !c.Insecure && !cluster.Loopback(c.Host):
		v.add("cluster.tls", "required with host = %q, which is not a loopback address: without TLS anyone who can reach the port can send this node's actors messages. "+
			"Add a [cluster.tls] table with ca_file, cert_file and key_file (docs/cluster.md#mutual-tls), or set insecure = true in [cluster] on a network where every host is trusted", c.Host)
	}
}

// automanaged checks the automanaged membership, and that no etcd table
// is given with it.
func (v *validator) automanaged(c *Cluster) {
	const at = "cluster.automanaged"
	if c.Etcd.Endpoints != nil {
		v.add("cluster.etcd", `only with membership = "etcd" (membership is "automanaged")`)
	}
	a := c.Automanaged
	if a.Peers == nil {
		v.add(at, `required with membership = "automanaged" (a [cluster.automanaged] table with port and peers)`)
		return
	}
	if a.Host != "" {
		v.host(at+".host", a.Host)
	}
	if a.Port == 0 {
		v.add(at+".port", "required (the port of this node's /_health endpoint, listed in peers)")
	} else {
		v.port(at+".port", a.Port, false)
		if a.Port == c.Port && (a.Host == "" || a.Host == c.Host) {
			v.add(at+".port", "%d is also cluster.port: the endpoint needs a port of its own", a.Port)
		}
	}
	if len(a.Peers) == 0 {
		v.add(at+".peers", `at least one peer is required (every node's host:port, this one's included)`)
	}
	for i, p := range a.Peers {
		v.hostPort(fmt.Sprintf("%s.peers[%d]", at, i), p)
	}
	if a.Refresh <= 0 {
		v.add(at+".refresh_ms", "must be above 0, got %d", a.Refresh.Milliseconds())
	}
}

// clusterDatabase checks database_url or database_url_env, exactly one of which
// is required.
func (v *validator) clusterDatabase(c *Cluster) {
	switch {
	case c.DatabaseURL != "" && c.DatabaseURLEnv != "":
		v.add("cluster.database_url", "give database_url or database_url_env, not both")
	case c.DatabaseURL != "":
		v.check("cluster.database_url", checkPostgresURL(c.DatabaseURL))
	case c.DatabaseURLEnv != "":
		key := "cluster.database_url_env"
		if !v.check(key, config.CheckEnvName(c.DatabaseURLEnv)) {
			return
		}
		val, ok := os.LookupEnv(c.DatabaseURLEnv)
		switch {
		case !ok:
			v.add(key, "environment variable %s is not set", c.DatabaseURLEnv)
		case strings.TrimSpace(val) == "":
			v.add(key, "environment variable %s is empty", c.DatabaseURLEnv)
		case checkPostgresURL(strings.TrimSpace(val)) != nil:
			// Never the value: it may hold a password.
			v.add(key, "environment variable %s does not hold a valid postgres:// URL", c.DatabaseURLEnv)
		}
	default:
		v.add("cluster.database_url", `required: the PostgreSQL URL of the shared state ("postgres://user@host:5432/musepi"), or database_url_env naming a variable that holds it`)
	}
}

// host checks a host name or IP address and reports whether it is one.
func (v *validator) host(key, h string) bool {
	if h == "" {
		v.add(key, "must not be empty")
		return false
	}
	return v.check(key, config.CheckHost(h))
}

// hostPort checks a host:port address to dial (config.SplitAddress) and
// returns its host.
func (v *validator) hostPort(key, addr string) (string, bool) {
	host, err := config.SplitAddress(addr)
	if err != nil {
		v.add(key, "%v", err)
		return "", false
	}
	return host, true
}

// port checks a port number; zero is allowed when free is.
func (v *validator) port(key string, n int, free bool) {
	lo := 1
	if free {
		lo = 0
	}
	if n < lo || n > 65535 {
		v.add(key, "must be %d to 65535, got %d", lo, n)
	}
}

// Database is the PostgreSQL URL of the shared state: database_url, or
// the value of the variable database_url_env names.
func (c *Cluster) Database() string {
	if c.DatabaseURLEnv != "" {
		return strings.TrimSpace(os.Getenv(c.DatabaseURLEnv))
	}
	return c.DatabaseURL
}

// ClusterConfig is the cluster.JoinConfig of the [cluster] table: its
// name, addresses, membership, handover bound, and TLS, whose files it
// reads now (after validating the whole configuration again, like
// RuntimeOptions). The caller sets Store, and Client for a client member.
func (c *Config) ClusterConfig() (cluster.JoinConfig, error) {
	if c.Cluster == nil {
		return cluster.JoinConfig{}, errors.New("config: no [cluster] table")
	}
	if err := c.Validate(); err != nil {
		return cluster.JoinConfig{}, err
	}
	// The TLS files as they are now (a problem: changed since Validate).
	ld, probs := (&keys{c: c}).check(c.Config)
	if len(probs) > 0 {
		return cluster.JoinConfig{}, &config.Error{File: c.File, Problems: probs}
	}
	cc := *c.Cluster
	cc.etcdTLS = ld.etcdTLS
	return cluster.JoinConfig{Name: cc.Name, Host: cc.Host, Port: cc.Port, AdvertiseHost: cc.AdvertiseAddress,
		Membership: cc.membership(), TLS: ld.clusterTLS, Insecure: cc.Insecure,
		HandoverTimeout: cc.HandoverTimeout}, nil
}

// membership is the cluster.Membership the table describes.
func (c *Cluster) membership() cluster.Membership {
	if c.Membership == MembershipAutomanaged {
		host := c.Automanaged.Host
		if host == "" {
			host = c.Host
		}
		return cluster.Automanaged(cluster.AutomanagedConfig{Host: host, Port: c.Automanaged.Port,
			Peers: c.Automanaged.Peers, Refresh: c.Automanaged.Refresh})
	}
	return cluster.Etcd(c.EtcdConfig())
}

// EtcdConfig is the [cluster.etcd] table as the cluster package takes it,
// with the etcd client's TLS read from [cluster.etcd.tls]'s files when
// the file was loaded (Load, Parse, LoadCluster; ClusterConfig reads them
// again); no TLS without the table, or for a Cluster that was not loaded.
func (c *Cluster) EtcdConfig() cluster.EtcdConfig {
	return cluster.EtcdConfig{Endpoints: c.Etcd.Endpoints, Prefix: c.Etcd.Prefix, DialTimeout: c.Etcd.DialTimeout, TLS: c.etcdTLS}
}
