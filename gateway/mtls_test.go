package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/scope"
)

// TestClientCertificateInjection: an upstream that requires a client certificate from its own CA
// gets the lease's certificate from the broker; the sandbox never holds it.
func TestClientCertificateInjection(t *testing.T) {
	// The upstream's client CA, and a certificate it issued for the lease.
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "client CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(42), Subject: pkix.Name{CommonName: "airlock-l-1"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	kder, _ := x509.MarshalECPrivateKey(key)
	secret := broker.Secret{
		"certificate": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})),
		"serial":      "2a",
	}

	h := newHarness(t)
	cat, err := broker.NewCatalog([]broker.Entry{{Name: "mtls", Source: broker.Source{Kind: broker.SourcePKI, Role: "task"},
		Inject: broker.Injection{Kind: broker.InjectClientCert}, Hosts: []string{"api.example.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	p := h.proxyHandler()
	p.Reload(cat, p.dyn.Load().pins, nil, budget.Budget{})
	p.cfg.Broker = &fakeBroker{get: func(context.Context, string, *broker.Entry) (broker.Secret, error) { return secret, nil }}
	h.scopes = []scope.Scope{{Host: "api.example.test", Credential: "mtls"}}

	leaf, _ := h.ca.Leaf("api.example.test")
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "client=%s", r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	up.StartTLS()
	defer up.Close()
	addr := up.Listener.Addr().String()
	p.dyn.Load().pins["api.example.test:443"] = netip.MustParseAddrPort(addr)
	h.dialer.allowed[addr] = true

	resp, err := h.client().Get("https://api.example.test/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "client=airlock-l-1" {
		t.Fatalf("mTLS upstream: %d %q", resp.StatusCode, body)
	}
	if rec := h.sink.last(); rec.Credential != "mtls" || rec.Decision != "allow" {
		t.Fatalf("audit %+v", rec)
	}

	// Without the certificate (another credential kind on the same host) the upstream refuses.
	h.scopes = []scope.Scope{{Host: "api.example.test"}}
	resp, err = h.client().Get("https://api.example.test/x")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("the upstream accepted a request without a client certificate")
		}
	}
}
