package clustercfg

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/internal/testkit/testcert"
)

// withKeys adds lines to src's [cluster] table (its first line).
func withKeys(src string, lines ...string) string {
	first, rest, _ := strings.Cut(src, "\n")
	return first + "\n" + strings.Join(lines, "\n") + "\n" + rest
}

// tomlTLS is a TLS table under header naming files (empty ones left
// out), and extra lines.
func tomlTLS(header string, f testcert.Files, extra ...string) string {
	var b strings.Builder
	b.WriteString(header + "\n")
	for _, kv := range [][2]string{{"ca_file", f.CA}, {"cert_file", f.Cert}, {"key_file", f.Key}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "%s = %q\n", kv[0], kv[1])
		}
	}
	for _, l := range extra {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// httpsEtcd is etcdCluster with an https:// endpoint.
var httpsEtcd = strings.Replace(etcdCluster, "http://", "https://", 1)

func TestClusterTLSValidation(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	ca, other := testcert.NewCA(t, "cluster CA"), testcert.NewCA(t, "other CA")
	good := ca.Issue(t, testcert.Cert{Name: "node1"})
	second := ca.Issue(t, testcert.Cert{Name: "node2"})
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	with := func(change func(*testcert.Files)) testcert.Files {
		f := good
		change(&f)
		return f
	}
	const clusterTLS, etcdTLS = "[cluster.tls]", "[cluster.etcd.tls]"
	cases := []struct {
		name, rest string
		key, msg   string // the one problem: exactly this key, its message containing msg
	}{
		{"insecure not a boolean", withKeys(etcdCluster, `insecure = "yes"`), "cluster.insecure", "must be a boolean (true or false), got a string"},
		{"insecure with TLS", withKeys(etcdCluster, "insecure = true") + tomlTLS(clusterTLS, good), "cluster.insecure", "not with a [cluster.tls] table"},
		{"every interface without TLS", withKeys(etcdCluster, `host = "0.0.0.0"`, `advertise_address = "10.0.0.1:7001"`), "cluster.tls",
			`required with host = "0.0.0.0", which is not a loopback address: without TLS anyone who can reach the port can send this node's actors messages. ` +
				"Add a [cluster.tls] table with ca_file, cert_file and key_file (docs/cluster.md#mutual-tls), or set insecure = true in [cluster]"},
		{"a host name without TLS", withKeys(etcdCluster, `host = "node1.internal"`), "cluster.tls", `required with host = "node1.internal"`},
		{"ca_file missing", etcdCluster + tomlTLS(clusterTLS, with(func(f *testcert.Files) { f.CA = "" })), "cluster.tls.ca_file",
			"required (the PEM file of the certificate of the cluster CA, which signs every member's certificate)"},
		{"cert_file missing", etcdCluster + tomlTLS(clusterTLS, with(func(f *testcert.Files) { f.Cert = "" })), "cluster.tls.cert_file",
			"required (the PEM file of this member's certificate, signed by ca_file's CA)"},
		{"key_file missing", etcdCluster + tomlTLS(clusterTLS, with(func(f *testcert.Files) { f.Key = "" })), "cluster.tls.key_file", "required (the PEM file of cert_file's private key)"},
		{"an unknown key", etcdCluster + tomlTLS(clusterTLS, good, "verify = false"), "cluster.tls.verify", "unknown key (allowed: ca_file, cert_file, key_file)"},
		{"a path with ~user", etcdCluster + tomlTLS(clusterTLS, with(func(f *testcert.Files) { f.CA = "~nobody/ca.pem" })), "cluster.tls.ca_file", `only a leading "~" or "~/" is expanded`},
		{"ca_file not there", etcdCluster + tomlTLS(clusterTLS, with(func(f *testcert.Files) { f.CA += ".missing" })), "cluster.tls.ca_file", "no such file or directory"},
		{"ca_file not PEM", etcdCluster + tomlTLS(clusterTLS, with(func(f *testcert.Files) { f.CA = notPEM })), "cluster.tls.ca_file", notPEM + " holds no PEM certificate"},
		{"cert_file holds a key", etcdCluster + tomlTLS(clusterTLS, with(func(f *testcert.Files) { f.Cert = f.Key })), "cluster.tls.cert_file", "holds no PEM certificate"},
		{"key_file of another certificate", etcdCluster + tomlTLS(clusterTLS, with(func(f *testcert.Files) { f.Key = second.Key })), "cluster.tls.key_file",
			second.Key + " is not the private key of cert_file's certificate: tls: private key does not match public key"},
		{"a certificate of another CA", etcdCluster + tomlTLS(clusterTLS, with(func(f *testcert.Files) {
			o := other.Issue(t, testcert.Cert{Name: "intruder"})
			f.Cert, f.Key = o.Cert, o.Key
		})), "cluster.tls.cert_file", "this node's certificate (CN=intruder) does not verify as a server (RootCAs, extended key usage serverAuth): x509: certificate signed by unknown authority"},
		{"an expired certificate", etcdCluster + tomlTLS(clusterTLS, ca.Issue(t, testcert.Cert{Name: "old", NotAfter: time.Now().Add(-time.Minute)})),
			"cluster.tls.cert_file", "certificate has expired"},
		{"a server-only certificate", etcdCluster + tomlTLS(clusterTLS, ca.Issue(t, testcert.Cert{Name: "server", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})),
			"cluster.tls.cert_file", "does not verify as a client (ClientCAs, extended key usage clientAuth)"},
		{"a certificate for another address", withKeys(etcdCluster, `host = "0.0.0.0"`, `advertise_address = "10.0.0.2:7001"`) +
			tomlTLS(clusterTLS, ca.Issue(t, testcert.Cert{Name: "node", Hosts: []string{"10.0.0.1"}})),
			"cluster.tls.cert_file", "is not valid for 10.0.0.2, the name the other members verify when they dial it"},
		{"etcd TLS with an http:// endpoint", etcdCluster + tomlTLS(etcdTLS, good), "cluster.etcd.endpoints[0]",
			`want an https:// URL with [cluster.etcd.tls] (the etcd client sends http:// in plaintext), got "http://127.0.0.1:2379"`},
		{"etcd TLS without ca_file", httpsEtcd + tomlTLS(etcdTLS, with(func(f *testcert.Files) { f.CA = "" })), "cluster.etcd.tls.ca_file",
			"required (the PEM file of the certificate of the CA that signed etcd's server certificate)"},
		{"etcd TLS with a certificate and no key", httpsEtcd + tomlTLS(etcdTLS, with(func(f *testcert.Files) { f.Key = "" })), "cluster.etcd.tls.key_file",
			"required (with cert_file: the PEM file of its private key)"},
		{"etcd TLS with a key and no certificate", httpsEtcd + tomlTLS(etcdTLS, with(func(f *testcert.Files) { f.Cert = "" })), "cluster.etcd.tls.cert_file",
			"required (with key_file: the PEM file of the client certificate)"},
		{"etcd TLS, an unknown key", httpsEtcd + tomlTLS(etcdTLS, good, "insecure_skip_verify = true"), "cluster.etcd.tls.insecure_skip_verify", "unknown key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(doc("", "", tc.rest)))
			if err == nil {
				t.Fatalf("no error for\n%s", tc.rest)
			}
			if cfg != nil {
				t.Error("a config came back with the error")
			}
			probs := problems(t, err)
			if len(probs) != 1 || probs[0].Key != tc.key || !strings.Contains(probs[0].Message, tc.msg) {
				t.Errorf("got\n%v\nwant the one problem %s: ...%s...", err, tc.key, tc.msg)
			}
		})
	}
}

// TestClusterTLSAccepted: what the TLS rules let through, and the
// cluster.JoinConfig it makes.
func TestClusterTLSAccepted(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	ca := testcert.NewCA(t, "cluster CA")
	node := ca.Issue(t, testcert.Cert{Name: "node1"})
	caOnly := testcert.Files{CA: node.CA}
	for _, tc := range []struct {
		name     string
		rest     string
		tls      bool // ClusterConfig has TLS
		insecure bool
	}{
		{"the default host, plaintext", etcdCluster, false, false},
		{"IPv6 loopback, plaintext", withKeys(etcdCluster, `host = "::1"`), false, false},
		{"localhost, plaintext", withKeys(etcdCluster, `host = "localhost"`), false, false},
		{"every interface, insecure", withKeys(etcdCluster, `host = "0.0.0.0"`, `advertise_address = "10.0.0.1:7001"`, "insecure = true"), false, true},
		{"TLS on loopback", etcdCluster + tomlTLS("[cluster.tls]", node), true, false},
		{"TLS on every interface, advertised at the certificate's address", withKeys(etcdCluster, `host = "0.0.0.0"`, `advertise_address = "127.0.0.1:7001"`) +
			tomlTLS("[cluster.tls]", node), true, false},
		{"etcd TLS, its CA only", httpsEtcd + tomlTLS("[cluster.etcd.tls]", caOnly), false, false},
		{"etcd TLS with a client certificate, and TLS", httpsEtcd + tomlTLS("[cluster.etcd.tls]", node) + tomlTLS("[cluster.tls]", node), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(doc("", "", tc.rest)))
			if err != nil {
				t.Fatal(err)
			}
			cc, err := cfg.ClusterConfig()
			if err != nil {
				t.Fatal(err)
			}
			if (cc.TLS != nil) != tc.tls || cc.Insecure != tc.insecure {
				t.Errorf("ClusterConfig: TLS %v, Insecure %v; want TLS: %v, Insecure %v", cc.TLS != nil, cc.Insecure, tc.tls, tc.insecure)
			}
			if cc.TLS != nil && (cc.TLS.RootCAs == nil || cc.TLS.ClientCAs == nil || cc.TLS.Certificates[0].Leaf.Subject.CommonName != "node1") {
				t.Errorf("ClusterConfig.TLS: %+v; want node1's certificate and the CA both ways", cc.TLS)
			}
		})
	}
}

// TestClusterTLSRelativePaths: Load takes the TLS files' relative paths
// from the configuration file's directory, whatever the working directory,
// and keeps them as written.
func TestClusterTLSRelativePaths(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	ca := testcert.NewCA(t, "cluster CA")
	node := ca.Issue(t, testcert.Cert{Name: "node1"})
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "certs"), 0o700); err != nil {
		t.Fatal(err)
	}
	rel := testcert.Files{}
	for _, f := range []struct {
		from string
		to   *string
	}{{node.CA, &rel.CA}, {node.Cert, &rel.Cert}, {node.Key, &rel.Key}} {
		data, err := os.ReadFile(f.from)
		if err != nil {
			t.Fatal(err)
		}
		*f.to = filepath.Join("certs", filepath.Base(f.from))
		if err := os.WriteFile(filepath.Join(dir, *f.to), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "node1.toml")
	if err := os.WriteFile(path, []byte(doc("", "", etcdCluster+tomlTLS("[cluster.tls]", rel))), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := *cfg.Cluster.TLS; got != (TLSFiles{CAFile: rel.CA, CertFile: rel.Cert, KeyFile: rel.Key}) {
		t.Errorf("Cluster.TLS %+v, want the paths as written", got)
	}
	cc, err := cfg.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cc.TLS == nil || cc.TLS.Certificates[0].Leaf.Subject.CommonName != "node1" {
		t.Errorf("ClusterConfig.TLS %+v, want node1's certificate", cc.TLS)
	}
}

// TestLoadClusterTLS: LoadCluster on a node's file of a mutual-TLS
// cluster (issue 36: it panicked) checks the TLS tables as Load does, and
// the table it returns gives EtcdConfig the etcd client's TLS, as Load's
// does; without [cluster.etcd.tls], no TLS.
func TestLoadClusterTLS(t *testing.T) {
	t.Setenv(testKeyEnv, "") // the provider's key: LoadCluster needs none
	ca, other := testcert.NewCA(t, "cluster CA"), testcert.NewCA(t, "other CA")
	node := ca.Issue(t, testcert.Cert{Name: "node1"})
	intruder := other.Issue(t, testcert.Cert{Name: "intruder"})
	intruder.CA = node.CA // the cluster CA, which did not sign it
	dir := t.TempDir()
	write := func(name, rest string) string {
		path := filepath.Join(dir, name+".toml")
		if err := os.WriteFile(path, []byte(doc("", "", rest)), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	mutual := write("mutual", httpsEtcd+tomlTLS("[cluster.etcd.tls]", node)+tomlTLS("[cluster.tls]", node))
	c, err := LoadCluster(mutual)
	if err != nil {
		t.Fatal(err)
	}
	checkEtcdTLS(t, "LoadCluster", c.EtcdConfig().TLS)

	t.Setenv(testKeyEnv, "sk-test")
	cfg, err := Load(mutual)
	if err != nil {
		t.Fatal(err)
	}
	checkEtcdTLS(t, "Load", cfg.Cluster.EtcdConfig().TLS)
	t.Setenv(testKeyEnv, "")

	c, err = LoadCluster(write("plain", etcdCluster))
	if err != nil || c.EtcdConfig().TLS != nil {
		t.Errorf("LoadCluster without [cluster.etcd.tls]: %v; want no etcd TLS", err)
	}
	foreign := write("foreign", httpsEtcd+tomlTLS("[cluster.etcd.tls]", node)+tomlTLS("[cluster.tls]", intruder))
	_, err = LoadCluster(foreign)
	if probs := problems(t, err); len(probs) != 1 || probs[0].Key != "cluster.tls.cert_file" ||
		!strings.Contains(probs[0].Message, "certificate signed by unknown authority") {
		t.Errorf("LoadCluster with a certificate of another CA: %v; want the one problem on cluster.tls.cert_file", err)
	}
}

// checkEtcdTLS fails unless cfg is the etcd client's TLS of node1's
// files: the CA as RootCAs, node1's certificate.
func checkEtcdTLS(t *testing.T, from string, cfg *tls.Config) {
	t.Helper()
	if cfg == nil || cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.Certificates[0].Leaf.Subject.CommonName != "node1" {
		t.Errorf("%s: EtcdConfig().TLS = %+v; want the CA and node1's client certificate", from, cfg)
	}
}
