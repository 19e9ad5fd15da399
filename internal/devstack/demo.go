package devstack

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"
)

// DemoUpstream is the HTTPS server behind api.example.test in the dev node: it answers /whoami
// when the request carries the demo credential, and 401 otherwise. It shows the credential was
// injected without ever printing it.
type DemoUpstream struct {
	Addr string
	srv  *http.Server
}

// StartDemo serves on addr with cert until ctx ends. secret returns the expected token.
func StartDemo(ctx context.Context, addr string, cert *tls.Certificate, secret func() string) (*DemoUpstream, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("demo upstream: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		want := "Bearer " + secret()
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) != 1 {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, "demo upstream: no valid credential in this request")
			return
		}
		fmt.Fprintln(w, "demo upstream: hello, the gateway injected the demo credential (the sandbox never saw it)")
	})
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go srv.ServeTLS(l, "", "")
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	return &DemoUpstream{Addr: l.Addr().String(), srv: srv}, nil
}
