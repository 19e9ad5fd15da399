package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Authority signs leaf certificates. Safe for concurrent use.
type Authority struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is the certificate sandboxes must trust.
	CertPEM []byte

	leafKey *ecdsa.PrivateKey // one key for every leaf: minting is then a signature, not a keygen

	mu     sync.Mutex
	leaves map[string]*leaf
	hits   atomic.Int64
	misses atomic.Int64
}

// CacheStats reports leaf certificates served from the cache and minted.
func (a *Authority) CacheStats() (hits, misses int64) { return a.hits.Load(), a.misses.Load() }

type leaf struct {
	once sync.Once
	cert *tls.Certificate
	err  error
}

// LoadOrCreate reads ca.pem and ca-key.pem from dir, creating a new ECDSA P-256 authority named
// name when they are absent. The key file is written with mode 0600.
func LoadOrCreate(dir, name string) (*Authority, error) {
	certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, os.ErrNotExist) {
		if err := create(certPath, keyPath, name); err != nil {
			return nil, err
		}
		certPEM, err = os.ReadFile(certPath)
	}
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	return Parse(certPEM, keyPEM)
}

// Parse builds an Authority from PEM.
func Parse(certPEM, keyPEM []byte) (*Authority, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("ca: certificate is not a CA")
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("ca: key cannot sign")
	}
	lk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &Authority{Cert: cert, Key: signer, CertPEM: certPEM, leafKey: lk, leaves: map[string]*leaf{}}, nil
}

func create(certPath, keyPath, name string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"airlock"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(5, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            1,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	return os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// Leaf returns a certificate for host, minting it on first use and caching it.
func (a *Authority) Leaf(host string) (*tls.Certificate, error) {
	a.mu.Lock()
	l, ok := a.leaves[host]
	if !ok {
		l = &leaf{}
		a.leaves[host] = l
		a.misses.Add(1)
	} else {
		a.hits.Add(1)
	}
	a.mu.Unlock()
	l.once.Do(func() { l.cert, l.err = a.mint(host) })
	return l.cert, l.err
}

func (a *Authority) mint(host string) (*tls.Certificate, error) {
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, &a.leafKey.PublicKey, a.Key)
	if err != nil {
		return nil, fmt.Errorf("ca: leaf for %s: %w", host, err)
	}
	leafCert, _ := x509.ParseCertificate(der)
	return &tls.Certificate{Certificate: [][]byte{der, a.Cert.Raw}, PrivateKey: a.leafKey, Leaf: leafCert}, nil
}

// Pool returns a certificate pool holding only this authority.
func (a *Authority) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.Cert)
	return p
}
