package testcert

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestIssue: the files load as a key pair that chains to the CA's file,
// with the SANs, usages and validity asked for.
func TestIssue(t *testing.T) {
	ca := NewCA(t, "test CA")
	for _, tc := range []struct {
		name      string
		cert      Cert
		host      string // VerifyHostname accepts it
		usage     x509.ExtKeyUsage
		expired   bool
		wantUsage []x509.ExtKeyUsage
	}{
		{"defaults", Cert{Name: "node1"}, "127.0.0.1", x509.ExtKeyUsageClientAuth, false,
			[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
		{"a DNS name and an IPv6 address", Cert{Name: "node2", Hosts: []string{"node2.internal", "::1"}}, "node2.internal", x509.ExtKeyUsageServerAuth, false,
			[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
		{"server only", Cert{Name: "server", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, "127.0.0.1", x509.ExtKeyUsageServerAuth, false,
			[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		{"expired", Cert{Name: "old", NotAfter: time.Now().Add(-time.Minute)}, "127.0.0.1", x509.ExtKeyUsageServerAuth, true,
			[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := ca.Issue(t, tc.cert)
			pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
			if err != nil {
				t.Fatal(err)
			}
			caPEM, err := os.ReadFile(files.CA)
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(caPEM) {
				t.Fatal("no certificate in the CA file")
			}
			leaf := pair.Leaf
			if leaf.Subject.CommonName != tc.cert.Name || !slices.Equal(leaf.ExtKeyUsage, tc.wantUsage) {
				t.Errorf("CN %q, usages %v; want %q, %v", leaf.Subject.CommonName, leaf.ExtKeyUsage, tc.cert.Name, tc.wantUsage)
			}
			if err := leaf.VerifyHostname(tc.host); err != nil {
				t.Error(err)
			}
			_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{tc.usage}})
			if tc.expired != (err != nil) {
				t.Errorf("Verify: %v; want an error: %v", err, tc.expired)
			}
		})
	}
}

// TestConfig: two configurations of one CA complete a mutual handshake;
// one of another CA is refused.
func TestConfig(t *testing.T) {
	ca, other := NewCA(t, "cluster CA"), NewCA(t, "other CA")
	server := ca.Config(t, Cert{Name: "server"})
	server.ClientAuth = tls.RequireAndVerifyClientCert
	for _, tc := range []struct {
		name   string
		client *tls.Config
		ok     bool
	}{
		{"same CA", ca.Config(t, Cert{Name: "client"}), true},
		{"another CA", other.Config(t, Cert{Name: "client"}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.client.ServerName = "127.0.0.1"
			err := Handshake(t, server, tc.client)
			if tc.ok != (err == nil) {
				t.Errorf("handshake: %v; want success: %v", err, tc.ok)
			}
		})
	}
}
