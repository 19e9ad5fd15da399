package docker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/airlock-dev/airlock/pool/inside"
)

// TestTrustStoreHoldsTheBundle: the JVM's trust store holds what the PEM bundle does, the
// deployment CA included, under the password the sandbox is told.
func TestTrustStoreHoldsTheBundle(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "test deployment CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := writeBundle(dir, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		t.Fatal(err)
	}
	bundle, _ := os.ReadFile(filepath.Join(dir, "ca-bundle.pem"))
	p12, _ := os.ReadFile(filepath.Join(dir, "ca-truststore.p12"))
	certs, err := pkcs12.DecodeTrustStore(p12, inside.TrustStorePassword)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(bundle), "BEGIN CERTIFICATE"); len(certs) != n || n == 0 {
		t.Fatalf("trust store holds %d certificates, the bundle %d", len(certs), n)
	}
	if last := certs[len(certs)-1]; last.Subject.CommonName != "test deployment CA" {
		t.Fatalf("the deployment CA is not in the trust store (last is %q)", last.Subject.CommonName)
	}
}

// TestClientEnvNamesTheGateway: the JVM gets the gateway as its proxy and the trust store.
func TestClientEnvNamesTheGateway(t *testing.T) {
	env := strings.Join(inside.Env("http://10.213.0.1:3128", "/workspace"), "\n")
	for _, want := range []string{"HTTPS_PROXY=http://10.213.0.1:3128", "NO_PROXY=\n", "NODE_USE_ENV_PROXY=1", "PIP_CERT=" + inside.BundlePath, "NPM_CONFIG_CAFILE=" + inside.BundlePath,
		"-Dhttps.proxyHost=10.213.0.1 -Dhttps.proxyPort=3128", "-Djavax.net.ssl.trustStore=" + inside.TrustStorePath} {
		if !strings.Contains(env, want) {
			t.Errorf("sandbox environment lacks %q:\n%s", want, env)
		}
	}
}
