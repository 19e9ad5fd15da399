package api_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/slots"
)

// A tenant that asks for long answers and never reads them (downloads, which are streams, and
// listings of megabytes, which are not) holds no more than its bounds: its two stream slots and
// two call slots, past which it is refused naming api.streams.per_identity and
// api.calls.per_identity. Another tenant is served meanwhile; after api.timeouts.stall the
// unread answers are cut off, their connections closed, and the tenant is served again.
func TestSlowReadersBoundedPerTenant(t *testing.T) {
	e := newBoundEnv(t, bounds{smallBuffers: true,
		timeouts: slots.Timeouts{Header: 5 * time.Second, Body: 5 * time.Second, Stall: 2 * time.Second, Idle: 5 * time.Second}})
	acme, globex := "/v1/leases/"+e.leases["acme"], "/v1/leases/"+e.leases["globex"]
	var unread []net.Conn
	for range 2 {
		unread = append(unread, e.open("127.0.0.1", true, "key-acme", "GET", acme+"/files?path=big", 0, ""),
			e.open("127.0.0.1", true, "key-acme", "GET", acme+"/fs/list?path=", 0, ""))
	}
	e.waitRefused("acme's unread downloads to hold its two stream slots", "127.0.0.2", "key-acme", "GET", acme+"/processes/p-1/wait", "too_many_streams")
	e.waitRefused("acme's unread listings to hold its two call slots", "127.0.0.2", "key-acme", "GET", "/v1/leases", "too_many_calls")
	e.refused("127.0.0.2", "key-acme", "GET", acme+"/files?path=big", "", "too_many_streams",
		"tenant acme already holds 2 calls open on this node (commands, process output and waits, file transfers, audit pages), the most one tenant may, all its keys together (api.streams.per_identity)")
	e.refused("127.0.0.2", "key-acme", "GET", acme+"/fs/stat?path=x", "", "too_many_calls", "(api.calls.per_identity)")
	e.served("127.0.0.3", "key-globex", "GET", globex+"/processes/p-1/wait", "", http.StatusNotFound)
	e.served("127.0.0.3", "key-globex", "GET", "/v1/leases", "", http.StatusOK)
	// Nothing reads the unread answers until the server has given them up: a read would
	// let them move again.
	wait.For(t, 10*time.Second, "acme's unread answers to be cut off after api.timeouts.stall, giving its slots back", func() bool {
		st, _ := e.call("127.0.0.2", "key-acme", "GET", acme+"/processes/p-1/wait", "")
		st2, _ := e.call("127.0.0.2", "key-acme", "GET", "/v1/leases", "")
		return st == http.StatusNotFound && st2 == http.StatusOK
	})
	for _, c := range unread {
		e.closed(c, "an unread answer's connection, cut off")
	}
}
