package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Loopback reports whether host, a Config.Host, is "localhost" or an IP
// address of the loopback network: the only hosts a node binds without
// TLS unless Config.Insecure is set.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckTLS reports why cfg cannot be the Config.TLS of a node the other
// members dial at host ("" when unknown: not checked). cfg needs the
// node's certificate (Certificates[0], presented both as server and as
// client) and the cluster CA as RootCAs and ClientCAs; the certificate must
// chain to RootCAs for server authentication and to ClientCAs for client
// authentication, and be valid for cfg.ServerName if set (every member then
// dials that name), else for host. Start checks it; the config package
// uses it to report a bad certificate before anything starts.
func CheckTLS(cfg *tls.Config, host string) error {
	switch {
	case len(cfg.Certificates) == 0:
		return errors.New("no certificate (Certificates: this node's, presented as server and as client)")
	case cfg.RootCAs == nil:
		return errors.New("no RootCAs (the cluster CA, which verifies the other members' server certificates; nil would trust the system's CAs)")
	case cfg.ClientCAs == nil:
		return errors.New("no ClientCAs (the cluster CA, which verifies the other members' client certificates)")
	}
	leaf, intermediates, err := parseCertificate(cfg.Certificates[0])
	if err != nil {
		return err
	}
	if err := verifyUsages(cfg, leaf, intermediates); err != nil {
		return err
	}
	name := cfg.ServerName
	if name == "" {
		name = host
	}
	if name != "" {
		if err := leaf.VerifyHostname(name); err != nil {
			return fmt.Errorf("this node's certificate (%s) is not valid for %s, the name the other members verify when they dial it: %w", leaf.Subject, name, err)
		}
	}
	return nil
}

// parseCertificate returns the leaf of cert, this node's certificate, and
// a pool of the intermediates its chain carries.
func parseCertificate(cert tls.Certificate) (*x509.Certificate, *x509.CertPool, error) {
	chain := cert.Certificate
	if len(chain) == 0 {
		return nil, nil, errors.New("Certificates[0] holds no certificate")
	}
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(chain[0]); err != nil {
			return nil, nil, fmt.Errorf("this node's certificate: %w", err)
		}
	}
	intermediates := x509.NewCertPool()
	for _, der := range chain[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, nil, fmt.Errorf("this node's certificate chain: %w", err)
		}
		intermediates.AddCert(c)
	}
	return leaf, intermediates, nil
}

// verifyUsages fails unless leaf, with intermediates, verifies as a server
// against cfg.RootCAs and as a client against cfg.ClientCAs.
func verifyUsages(cfg *tls.Config, leaf *x509.Certificate, intermediates *x509.CertPool) error {
	for _, check := range []struct {
		roots *x509.CertPool
		usage x509.ExtKeyUsage
		as    string
	}{
		{cfg.RootCAs, x509.ExtKeyUsageServerAuth, "a server (RootCAs, extended key usage serverAuth)"},
		{cfg.ClientCAs, x509.ExtKeyUsageClientAuth, "a client (ClientCAs, extended key usage clientAuth)"},
	} {
		opts := x509.VerifyOptions{Roots: check.roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{check.usage}}
		if _, err := leaf.Verify(opts); err != nil {
			return fmt.Errorf("this node's certificate (%s) does not verify as %s: %w", leaf.Subject, check.as, err)
		}
	}
	return nil
}

// dialedHost is the host the other members dial this node at: that of
// AdvertiseHost, else Host ("" when that is an unspecified address: the
// node advertises whatever its listener reports).
func (c Config) dialedHost() string {
	if c.AdvertiseHost != "" {
		if host, _, err := net.SplitHostPort(c.AdvertiseHost); err == nil {
			return host
		}
		return c.AdvertiseHost
	}
	if ip := net.ParseIP(c.Host); ip != nil && ip.IsUnspecified() {
		return ""
	}
	return c.Host
}

// checkTransport refuses a node that would serve its actors in plaintext
// on a non-loopback address, and checks TLS.
func (c Config) checkTransport() error {
	switch {
	case c.TLS != nil && c.Insecure:
		return fmt.Errorf("%w: TLS and Insecure are both set (Insecure only allows a non-loopback Host without TLS)", ErrConfig)
	case c.TLS != nil:
		if err := CheckTLS(c.TLS, c.dialedHost()); err != nil {
			return fmt.Errorf("%w: TLS: %w", ErrConfig, err)
		}
	case !c.Insecure && !Loopback(c.Host):
		return fmt.Errorf("%w: Host %q is not a loopback address and there is no TLS: anyone who reaches the port could send the node's actors messages; "+
			"set TLS (the cluster CA and this node's certificate), or Insecure on a network where every host is trusted", ErrConfig, c.Host)
	}
	return nil
}

// remoteTLS is the configuration of the node's gRPC server and dials: cfg
// with TLS 1.3 at least and client certificates required and verified.
// (gRPC sets each dial's ServerName to the host it dials unless cfg sets
// one.)
func remoteTLS(cfg *tls.Config) *tls.Config {
	out := cfg.Clone()
	out.MinVersion = max(out.MinVersion, tls.VersionTLS13)
	out.ClientAuth = tls.RequireAndVerifyClientCert
	return out
}

// remoteSecurity is the remote's options for Config.TLS: the same
// credentials for its server and its dials (none without TLS: protoactor's
// default is plaintext).
func (c Config) remoteSecurity() []remote.ConfigOption {
	if c.TLS == nil {
		return nil
	}
	creds := credentials.NewTLS(remoteTLS(c.TLS))
	return []remote.ConfigOption{remote.WithServerOptions(grpc.Creds(creds)), remote.WithDialOptions(grpc.WithTransportCredentials(creds))}
}
