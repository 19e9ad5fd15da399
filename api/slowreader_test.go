package api_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/slots"
)

// A tenant that asks for long answers and never reads them (downloads, which are streams, and
// listings of megabytes, which are not) holds no more than its bounds: its two stream slots and
// two call slots, past which it is refused naming api.streams.per_identity and
// api.calls.per_identity. Another tenant is served meanwhile; after api.timeouts.stall the
// unread answers are cut off, their connections closed, and the tenant is served again.
func TestSlowReadersBoundedPerTenant(t *testing.T) {
	e := newBoundEnv(t, bounds{smallBuffers: true,
		// The unread answers hold their slots until api.timeouts.stall cuts them off: long
		// enough for the checks below on a loaded machine (2 s was not, under -race in CI).
		timeouts: slots.Timeouts{Header: 5 * time.Second, Body: 5 * time.Second, Stall: 8 * time.Second, Idle: 60 * time.Second}})
	acme, globex := "/v1/leases/"+e.leases["acme"], "/v1/leases/"+e.leases["globex"]
	var unread []net.Conn
	for range 2 {
		unread = append(unread, e.open("127.0.0.1", true, "key-acme", "GET", acme+"/files?path=big", 0, ""),
			e.open("127.0.0.1", true, "key-acme", "GET", acme+"/fs/list?path=", 0, ""))
	}
	e.waitHeld("acme's unread downloads to hold its two stream slots", true, "tenant:acme", 2)
	e.waitHeld("acme's unread listings to hold its two call slots", false, "tenant:acme", 2)
	e.refused("127.0.0.2", "key-acme", "GET", acme+"/files?path=big", "", "too_many_streams",
		"tenant acme already holds 2 calls open on this node (commands, process output and waits, file transfers, audit pages), the most one tenant may, all its keys together (api.streams.per_identity)")
	e.refused("127.0.0.2", "key-acme", "GET", acme+"/fs/stat?path=x", "", "too_many_calls", "(api.calls.per_identity)")
	e.served("127.0.0.3", "key-globex", "GET", globex+"/processes/p-1/wait", "", http.StatusNotFound)
	e.served("127.0.0.3", "key-globex", "GET", "/v1/leases", "", http.StatusOK)
	// Nothing reads the unread answers until the server has given them all up: a read would
	// let one not yet cut off move again. A call is served once one slot of each kind is
	// back, so the wait looks at what the tenant holds.
	e.waitHeldFor(30*time.Second, "acme's unread downloads to be cut off after api.timeouts.stall, giving its stream slots back", true, "tenant:acme", 0)
	e.waitHeldFor(30*time.Second, "acme's unread listings to be cut off after api.timeouts.stall, giving its call slots back", false, "tenant:acme", 0)
	e.served("127.0.0.2", "key-acme", "GET", acme+"/processes/p-1/wait", "", http.StatusNotFound)
	e.served("127.0.0.2", "key-acme", "GET", "/v1/leases", "", http.StatusOK)
	for _, c := range unread {
		e.closed(c, "an unread answer's connection, cut off")
	}
}
