package api_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/slots"
)

// Kept-alive connections that send no next request hold their address's connection slots only
// until api.timeouts.idle closes them; meanwhile another connection from that address is
// refused, naming api.connections.per_address, and other addresses (another tenant, a
// reviewer key) are served.
func TestIdleConnectionsBoundedPerAddress(t *testing.T) {
	e := newBoundEnv(t, bounds{conns: slots.Conns{Max: 8, PerAddress: 3},
		timeouts: slots.Timeouts{Header: 5 * time.Second, Body: 5 * time.Second, Stall: 5 * time.Second, Idle: 2 * time.Second}})
	var idle []net.Conn
	for range 3 {
		c := e.open("127.0.0.1", false, "key-acme", "GET", "/v1/leases", 0, "")
		if st, out := e.answer(c); st != http.StatusOK {
			t.Fatalf("a call on a kept-alive connection: %d %v", st, out)
		}
		idle = append(idle, c)
	}
	e.refused("127.0.0.1", "key-acme", "GET", "/v1/leases", "", "too_many_connections",
		"127.0.0.1 already holds 3 connections to this listener, the most one address may (api.connections.per_address)")
	e.served("127.0.0.2", "key-globex", "GET", "/v1/leases", "", http.StatusOK)
	e.served("127.0.0.3", "key-secops", "GET", "/v1/approvals", "", http.StatusOK)
	for _, c := range idle {
		e.closed(c, "a kept-alive connection that sent nothing more, after api.timeouts.idle")
	}
	e.served("127.0.0.1", "key-acme", "GET", "/v1/leases", "", http.StatusOK)
}

// Connections that never authenticate (one that sends nothing, one whose headers never end,
// one whose body never comes to a call refused for want of a key) hold their address's slots
// only until api.timeouts.header or .body ends them; meanwhile the address is refused, naming
// api.connections.per_address, and other addresses are served.
func TestUnauthenticatedConnectionsBoundedPerAddress(t *testing.T) {
	e := newBoundEnv(t, bounds{conns: slots.Conns{Max: 8, PerAddress: 3},
		// Long enough for the checks below to see the slots held on a loaded machine.
		timeouts: slots.Timeouts{Header: 8 * time.Second, Body: 8 * time.Second, Stall: 10 * time.Second, Idle: 10 * time.Second}})
	silent := e.dial("127.0.0.1")
	headers := e.dial("127.0.0.1")
	io.WriteString(headers, "GET /v1/leases HTTP/1.1\r\nHost: api\r\n")
	body := e.open("127.0.0.1", false, "", "POST", "/v1/leases", 1000, "{")
	e.refused("127.0.0.1", "key-acme", "GET", "/v1/leases", "", "too_many_connections",
		"127.0.0.1 already holds 3 connections to this listener, the most one address may (api.connections.per_address)")
	e.served("127.0.0.2", "key-globex", "GET", "/v1/leases", "", http.StatusOK)
	e.served("127.0.0.3", "key-secops", "GET", "/v1/approvals", "", http.StatusOK)
	e.closed(silent, "a connection that sent nothing, after api.timeouts.header")
	e.closed(headers, "a connection whose headers never ended, after api.timeouts.header")
	if st, out := e.answer(body); st != http.StatusUnauthorized {
		t.Fatalf("a call without a key whose body never comes: %d %v; want 401", st, out)
	}
	e.closed(body, "an unauthenticated slow body's connection, after api.timeouts.body")
	e.served("127.0.0.1", "key-acme", "GET", "/v1/leases", "", http.StatusOK)
}
