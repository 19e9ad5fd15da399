package gateway

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// An intercepted session to an IP literal may omit its server name; a server name that is no
// host name at all is refused as a mismatch, never taken for an omitted one (before, an
// unparsable name was read as none, and the session was served).
func TestServerNameThatIsNoNameRefused(t *testing.T) {
	for _, c := range []struct {
		name, sni string
		ok        bool
	}{
		{"omitted", "", true},
		{"not a host name", "not a name!", false},
		{"another name", "api.example.test", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.setScopes([]scope.Scope{{CIDR: "93.184.215.0/24"}})
			conn := dialTimed(t, h.proxy.Listener.Addr().String())
			fmt.Fprintf(conn, "CONNECT 93.184.215.14:443 HTTP/1.1\r\nHost: 93.184.215.14:443\r\n\r\n")
			br := bufio.NewReader(conn)
			if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT: %v %v", resp, err)
			}
			tc := tls.Client(&bufferedConn{Conn: conn, r: br}, &tls.Config{ServerName: c.sni, InsecureSkipVerify: true})
			err := tc.Handshake()
			if c.ok {
				if err != nil {
					t.Fatalf("handshake: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("a handshake naming %q was served as 93.184.215.14", c.sni)
			}
			if rec, ok := h.sink.await(func(r audit.Record) bool { return r.Rule == rule.HostMismatch }); !ok || !strings.Contains(rec.Reason, "does not match") {
				t.Fatalf("record %+v", rec)
			}
			if h.dialer.saw("93.184.215.14:443") {
				t.Fatal("the refused session dialed its address")
			}
		})
	}
}
