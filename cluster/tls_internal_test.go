package cluster

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/musepi/musepi/internal/testkit/testcert"
)

// TestTransportAccepted: what Start lets through (TestStartRejectsBadConfig
// has what it refuses): plaintext on loopback, Insecure elsewhere, TLS with
// a certificate valid for the address the others dial.
func TestTransportAccepted(t *testing.T) {
	ca := testcert.NewCA(t, "cluster CA")
	node := ca.Config(t, testcert.Cert{Name: "node"})
	named := ca.Config(t, testcert.Cert{Name: "node", Hosts: []string{"musepi-node"}})
	named.ServerName = "musepi-node"
	for _, tc := range []struct {
		name   string
		change func(*Config)
	}{
		{"the default host, plaintext", func(*Config) {}},
		{"IPv6 loopback, plaintext", func(c *Config) { c.Host = "::1" }},
		{"localhost, plaintext", func(c *Config) { c.Host = "localhost" }},
		{"every interface, Insecure", func(c *Config) { c.Host, c.Insecure = "0.0.0.0", true }},
		{"every interface, TLS for the advertised address", func(c *Config) {
			c.Host, c.AdvertiseHost, c.TLS = "0.0.0.0", "127.0.0.1:7001", node
		}},
		{"every interface, TLS, nothing advertised (the listener's address: not checked)", func(c *Config) {
			c.Host, c.TLS = "0.0.0.0", node
		}},
		{"a ServerName every certificate carries", func(c *Config) { c.Host, c.TLS = "10.0.0.1", named }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Name: "c", Membership: InProcess(nil)}
			tc.change(&cfg)
			if _, err := cfg.withDefaults(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRemoteTLS: the remote's TLS requires TLS 1.3 and a client
// certificate of the cluster CA even when the configuration it is given
// asks for less, and a dial verifies the server's certificate against the
// CA and the dialed host.
func TestRemoteTLS(t *testing.T) {
	ca, other := testcert.NewCA(t, "cluster CA"), testcert.NewCA(t, "other CA")
	lax := ca.Config(t, testcert.Cert{Name: "server"})
	lax.MinVersion, lax.ClientAuth = tls.VersionTLS12, tls.NoClientCert
	server := remoteTLS(lax)
	// dial is a member's dial of 127.0.0.1 (gRPC sets the dialed host as
	// ServerName).
	dial := func(cfg *tls.Config) *tls.Config {
		out := remoteTLS(cfg)
		out.ServerName = "127.0.0.1"
		return out
	}
	member := ca.Config(t, testcert.Cert{Name: "member"})
	for _, tc := range []struct {
		name   string
		client *tls.Config
		want   string // "" succeeds; else in the client's error
	}{
		{"a member", dial(member), ""},
		{"no client certificate", func() *tls.Config {
			c := dial(member)
			c.Certificates = nil
			return c
		}(), "certificate required"},
		{"a client certificate of another CA", func() *tls.Config {
			c := dial(member)
			// Sent whatever CAs the server names (Go's client would
			// otherwise send none).
			intruder := other.Config(t, testcert.Cert{Name: "intruder"}).Certificates[0]
			c.Certificates = nil
			c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &intruder, nil }
			return c
		}(), "unknown certificate authority"},
		{"TLS 1.2", func() *tls.Config {
			c := dial(member)
			c.MinVersion, c.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
			return c
		}(), "protocol version"},
		{"a server of another CA", dial(other.Config(t, testcert.Cert{Name: "member"})), "certificate signed by unknown authority"},
		{"a server certificate for another host", func() *tls.Config {
			c := dial(member)
			c.ServerName = "10.0.0.9"
			return c
		}(), "not 10.0.0.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := testcert.Handshake(t, server, tc.client)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("handshake: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("handshake: %v; want an error with %q", err, tc.want)
			}
		})
	}
}
