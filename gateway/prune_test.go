package gateway

import (
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/airlock-dev/airlock/gateway/broker"
)

// prune asks whether each lease is live outside the transports' lock (the answer walks every
// hold of the gateway, and requests wait on that lock for their transport), and keeps a
// transport handed out while it asked, even of a lease it found with nothing held: the request
// it went to took its hold after the walk.
func TestPruneAsksOutsideTheLock(t *testing.T) {
	ts := newTransports(&http.Transport{TLSClientConfig: &tls.Config{}})
	ts.mtls = map[string]*mtlsTransport{}
	for _, lease := range []string{"l-busy", "l-gone", "l-live"} {
		ts.mtls[lease+"\x00"+"1"] = &mtlsTransport{t: ts.h1.Clone(), lease: lease}
	}
	asked := map[string]int{}
	ts.prune(func(lease string) bool {
		if !ts.mu.TryLock() {
			t.Errorf("live(%s) asked under the transports' lock", lease)
		} else {
			ts.mu.Unlock()
		}
		asked[lease]++
		if lease == "l-busy" {
			// A request of this lease, held after the walk, takes its transport meanwhile.
			if _, err := ts.forCert(ts.h1, "l-busy", broker.Secret{"serial": "1"}); err != nil {
				t.Fatal(err)
			}
		}
		return lease == "l-live"
	})
	for lease, n := range asked {
		if n != 1 {
			t.Errorf("live(%s) asked %d times", lease, n)
		}
	}
	for lease, want := range map[string]bool{"l-busy": true, "l-gone": false, "l-live": true} {
		if _, kept := ts.mtls[lease+"\x00"+"1"]; kept != want {
			t.Errorf("%s's transport kept %v, want %v", lease, kept, want)
		}
	}
	// Unused since, and still with nothing held: the next prune closes it.
	ts.prune(func(lease string) bool { return lease == "l-live" })
	if _, kept := ts.mtls["l-busy\x00"+"1"]; kept {
		t.Error("a transport unused since the last prune, of a lease with nothing held, is kept")
	}
}
