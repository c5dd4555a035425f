package clustercfg

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"

	"github.com/musepi/musepi/config"
)

// TLSFiles is a "[cluster.tls]" or "[cluster.etcd.tls]" table: PEM files,
// as written in the file (a relative path is taken from the configuration
// file's directory, a leading "~" is the home directory).
type TLSFiles struct {
	// CAFile ("ca_file") holds the certificates of the CA that signs the
	// peers' certificates. Required.
	CAFile string
	// CertFile ("cert_file") holds this member's certificate, followed by
	// any intermediate certificates; KeyFile ("key_file") its private key.
	// Required in [cluster.tls]; in [cluster.etcd.tls] both or neither
	// (for an etcd that asks for client certificates).
	CertFile string
	KeyFile  string
}

func decodeTLS(t *config.Table) *TLSFiles {
	f := &TLSFiles{}
	t.Str("ca_file", &f.CAFile)
	t.Str("cert_file", &f.CertFile)
	t.Str("key_file", &f.KeyFile)
	t.Done(nil)
	return f
}

// tlsTable describes one TLS table for its checks' messages.
type tlsTable struct {
	at     string // "cluster.tls"
	ca     string // what signs the peer's certificates
	mutual bool   // cert_file and key_file are required
}

// loadTLS reads table t's files and returns their TLS configuration: the
// CA as RootCAs (and, for a mutual table, ClientCAs), and the certificate
// with its key if given. It returns nil when a file is missing or bad,
// with a problem naming its key.
func (v *validator) loadTLS(t tlsTable, f *TLSFiles) *tls.Config {
	var bad bool
	read := func(key, path, required string) []byte {
		if path == "" {
			if required != "" {
				v.add(t.at+"."+key, "required (%s)", required)
				bad = true
			}
			return nil
		}
		data, err := v.readFile(path)
		if err != nil {
			v.add(t.at+"."+key, "%v", err)
			bad = true
		}
		return data
	}
	certRequired, keyRequired := pairRequired(t, f)
	caPEM := read("ca_file", f.CAFile, "the PEM file of the certificate of "+t.ca)
	certPEM := read("cert_file", f.CertFile, certRequired)
	keyPEM := read("key_file", f.KeyFile, keyRequired)
	if bad {
		return nil
	}
	cfg := &tls.Config{RootCAs: x509.NewCertPool()}
	if !cfg.RootCAs.AppendCertsFromPEM(caPEM) {
		v.add(t.at+".ca_file", "%s holds no PEM certificate", f.CAFile)
		bad = true
	}
	if t.mutual {
		cfg.ClientCAs = cfg.RootCAs
	}
	if certPEM != nil {
		pair, ok := v.keyPair(t, f, certPEM, keyPEM)
		if !ok {
			return nil
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if bad {
		return nil
	}
	return cfg
}

// pairRequired says why cert_file and key_file are required, when they
// are: in a mutual table, or when either is given; "" when they are not.
func pairRequired(t tlsTable, f *TLSFiles) (cert, key string) {
	switch {
	case t.mutual:
		return "the PEM file of this member's certificate, signed by ca_file's CA", "the PEM file of cert_file's private key"
	case f.CertFile != "" || f.KeyFile != "":
		return "with key_file: the PEM file of the client certificate", "with cert_file: the PEM file of its private key"
	}
	return "", ""
}

// keyPair parses a certificate file and its key file; when it cannot, it
// adds a problem on the key at fault and returns false.
func (v *validator) keyPair(t tlsTable, f *TLSFiles, certPEM, keyPEM []byte) (tls.Certificate, bool) {
	found := false
	for rest := certPEM; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		found = true
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			v.add(t.at+".cert_file", "%s: %v", f.CertFile, err)
			return tls.Certificate{}, false
		}
	}
	if !found {
		v.add(t.at+".cert_file", "%s holds no PEM certificate", f.CertFile)
		return tls.Certificate{}, false
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		v.add(t.at+".key_file", "%s is not the private key of cert_file's certificate: %v", f.KeyFile, err)
		return tls.Certificate{}, false
	}
	return pair, true
}

// readFile reads a file named in the configuration file.
func (v *validator) readFile(path string) ([]byte, error) {
	p, err := v.base.Resolve(path)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(p) // *fs.PathError: "open PATH: ..."
}
