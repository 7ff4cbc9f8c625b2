package mailpittest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Certificate is the self-signed certificate every TLS Mailpit of a test
// binary presents, for 127.0.0.1, ::1 and localhost.
type Certificate struct {
	// CertFile is the certificate in PEM: a client trusts it through
	// SSL_CERT_FILE (set it before the process's first TLS handshake, in
	// TestMain).
	CertFile string
	KeyFile  string
	// Dir holds both; Remove deletes it.
	Dir string
}

var cert struct {
	once sync.Once
	c    *Certificate
	err  error
}

// Cert makes the certificate once per process, in a temporary directory
// (Remove it when the tests are done).
func Cert() (*Certificate, error) {
	cert.once.Do(func() {
		dir, err := os.MkdirTemp("", "mailpittest-cert-")
		if err != nil {
			cert.err = err
			return
		}
		cert.c, cert.err = makeCert(dir)
	})
	return cert.c, cert.err
}

// Remove deletes the certificate's directory.
func (c *Certificate) Remove() { _ = os.RemoveAll(c.Dir) }

func makeCert(dir string) (*Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "mailpittest"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &Certificate{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem"), Dir: dir}
	if err := os.WriteFile(c.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		c.Remove()
		return nil, err
	}
	if err := os.WriteFile(c.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		c.Remove()
		return nil, err
	}
	return c, nil
}
