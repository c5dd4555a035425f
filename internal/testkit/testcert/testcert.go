// Package testcert makes certificate authorities and the certificates they
// sign for tests, with crypto/x509 (ECDSA P-256 keys), and writes them as
// PEM files into the test's temporary directory: what a cluster's mutual
// TLS needs, without openssl.
//
// It is part of the test kit (internal/testkit): the tests of cluster,
// config/clustercfg and cmd/musepi, cluster/etcdtest and nodetest use it.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the PEM files of one member's TLS identity: the CA that signs
// its peers, its certificate and its private key.
type Files struct {
	CA, Cert, Key string
}

// CA is a self-signed certificate authority.
type CA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate's PEM file
}

// NewCA makes a CA called name (its subject's common name) valid from an
// hour ago for a day, and writes its certificate to name-ca.pem in a new
// temporary directory of t.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testcert: CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testcert: CA %s: %v", name, err)
	}
	ca := &CA{dir: t.TempDir(), cert: cert, key: key}
	ca.file = ca.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

// Cert describes a certificate to issue; zero fields take their defaults.
type Cert struct {
	// Name is the subject's common name and the files' base name.
	// Required.
	Name string
	// Hosts are the subject alternative names: IP addresses become IP
	// SANs, anything else DNS SANs. Default "127.0.0.1".
	Hosts []string
	// Usages are the extended key usages; default server and client
	// authentication, what a cluster member's certificate needs.
	Usages []x509.ExtKeyUsage
	// NotAfter ends the validity; default a day from now (a time in the
	// past makes an expired certificate).
	NotAfter time.Time
}

// Config is the mutual TLS configuration of c, issued by ca as Issue
// does (Files.Load).
func (ca *CA) Config(t testing.TB, c Cert) *tls.Config {
	t.Helper()
	cfg, err := ca.Issue(t, c).Load()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Load reads the files into a mutual TLS configuration: the certificate
// and its key, and the CA as the roots that verify servers and the CAs
// that verify clients.
func (f Files) Load() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("testcert: %w", err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("testcert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("testcert: no certificate in %s", f.CA)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ClientCAs: pool}, nil
}

// Issue signs c with ca and writes the certificate and its key to
// NAME.pem and NAME-key.pem next to the CA's file (replacing those of a
// certificate issued under the same name before).
func (ca *CA) Issue(t testing.TB, c Cert) Files {
	t.Helper()
	if c.Name == "" {
		t.Fatal("testcert: Cert.Name is required")
	}
	hosts := c.Hosts
	if hosts == nil {
		hosts = []string{"127.0.0.1"}
	}
	usages := c.Usages
	if usages == nil {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	notAfter := c.NotAfter
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	notBefore := time.Now().Add(-time.Hour)
	if notAfter.Before(notBefore) {
		notBefore = notAfter.Add(-time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: c.Name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("testcert: certificate %s: %v", c.Name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testcert: key of %s: %v", c.Name, err)
	}
	return Files{CA: ca.file,
		Cert: ca.write(t, c.Name+".pem", "CERTIFICATE", der),
		Key:  ca.write(t, c.Name+"-key.pem", "PRIVATE KEY", keyDER)}
}

// Handshake runs a TLS handshake between server and client over a
// loopback connection and returns the client's error, the server's verdict
// on the client's certificate included (nil: both sides accepted the
// other).
func Handshake(t *testing.T, server, client *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_ = conn.(*tls.Conn).Handshake()
		_, _ = conn.Write([]byte{1})
	}()
	defer func() { <-done }()
	conn, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err != nil {
		return err
	}
	defer conn.Close()
	// TLS 1.3: the server's verdict on the client's certificate arrives
	// after the client's handshake, with the first read.
	_, err = conn.Read(make([]byte, 1))
	return err
}

// write writes one PEM block to name in the CA's directory and returns
// its path.
func (ca *CA) write(t testing.TB, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(ca.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("testcert: %v", err)
	}
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testcert: key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		t.Fatalf("testcert: serial: %v", err)
	}
	return n
}
