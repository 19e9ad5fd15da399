package gateway

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

// pinUpstreams serves handler as two upstreams the gateway is pinned to and may dial: plain at
// plainHost:80, and secure at tlsHost:443 over TLS with a certificate of the harness's CA.
func (h *harness) pinUpstreams(t testing.TB, handler http.Handler, plainHost, tlsHost string) {
	t.Helper()
	plain := httptest.NewServer(handler)
	t.Cleanup(plain.Close)
	leaf, err := h.ca.Leaf(tlsHost)
	if err != nil {
		t.Fatal(err)
	}
	secure := httptest.NewUnstartedServer(handler)
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	secure.StartTLS()
	t.Cleanup(secure.Close)
	p := h.proxyHandler()
	d := p.dyn.Load()
	p.Reload(d.catalog, map[string]netip.AddrPort{
		plainHost + ":80": netip.MustParseAddrPort(plain.Listener.Addr().String()),
		tlsHost + ":443":  netip.MustParseAddrPort(secure.Listener.Addr().String()),
	}, nil, d.budget)
	h.allowDial(plain.Listener.Addr().String(), secure.Listener.Addr().String())
}

// pinEcho pins hostPort (a tunnel's destination) to a TCP server on loopback that echoes what
// each connection sends, until the test ends.
func (h *harness) pinEcho(t testing.TB, hostPort string) {
	t.Helper()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	h.proxyHandler().dyn.Load().pins[hostPort] = netip.MustParseAddrPort(echo.Addr().String())
	h.allowDial(echo.Addr().String())
}

// allowDial lets the harness's dialer reach addrs.
func (h *harness) allowDial(addrs ...string) {
	h.dialer.mu.Lock()
	defer h.dialer.mu.Unlock()
	for _, a := range addrs {
		h.dialer.allowed[a] = true
	}
}
