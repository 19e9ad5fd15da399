package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/node"
)

// stateDir is where `airlock up` keeps its state: AIRLOCK_STATE_DIR, else
// $XDG_STATE_HOME/airlock, else ~/.local/state/airlock.
func stateDir() string {
	if d := os.Getenv("AIRLOCK_STATE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "airlock")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "airlock")
	}
	return filepath.Join(home, ".local", "state", "airlock")
}

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
		f, err := node.ReadClientFile(stateDir())
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
