package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/cmd/internal/cli"
)

// newClient finds the API: AIRLOCK_ADDR and AIRLOCK_TOKEN, else the local dev node's client file.
// An https API is verified against the system roots, the local node's deployment CA and
// AIRLOCK_CA_FILE.
func newClient() (*client.Client, error) {
	addr, tok := os.Getenv("AIRLOCK_ADDR"), os.Getenv("AIRLOCK_TOKEN")
	caFiles := []string{os.Getenv("AIRLOCK_CA_FILE")}
	if addr != "" {
		if tok == "" {
			return nil, errors.New("AIRLOCK_ADDR is set but AIRLOCK_TOKEN is not")
		}
	} else {
		f, err := cli.ReadClientFile(cli.StateDir())
		if err != nil {
			return nil, fmt.Errorf("no airlock node found: set AIRLOCK_ADDR and AIRLOCK_TOKEN, or start one with 'airlock up' (%v)", err)
		}
		addr, tok = f.Addr, f.Token
		caFiles = append(caFiles, f.CA)
	}
	c := &client.Client{Addr: addr, Token: tok}
	if strings.HasPrefix(addr, "https://") {
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		for _, f := range caFiles {
			if f == "" {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil || !roots.AppendCertsFromPEM(b) {
				return nil, fmt.Errorf("CA file %s holds no usable certificate (%v)", f, err)
			}
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		c.HTTP = &http.Client{Transport: t}
	}
	return c, nil
}
