package gateway

import (
	"crypto/tls"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/gateway/ca"
	"github.com/airlock-dev/airlock/rule"
)

// A cut closes a held TLS connection underneath, without waiting for its close alert: the
// recheck cuts every hold of the node on one goroutine, and a sandbox that stops reading a
// stream switched inside an intercepted session held it for the alert's 5 s write deadline,
// per stream, while the stream went on. Over a pipe nobody reads, a write blocks until it is
// read, so the old Close could not return before its deadline.
func TestCutClosesUnderTLSWithoutWaiting(t *testing.T) {
	auth, err := ca.LoadOrCreate(t.TempDir(), "test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := auth.Leaf("api.example.test")
	if err != nil {
		t.Fatal(err)
	}
	gw, sandbox := net.Pipe()
	t.Cleanup(func() { gw.Close(); sandbox.Close() })
	deadline := time.Now().Add(10 * time.Second)
	gw.SetDeadline(deadline) // the handshake's bound; cleared below
	sandbox.SetDeadline(deadline)
	server := tls.Server(gw, &tls.Config{Certificates: []tls.Certificate{*leaf}})
	client := tls.Client(sandbox, &tls.Config{ServerName: "api.example.test", RootCAs: auth.Pool()})
	handshake := make(chan error, 1)
	go func() { handshake <- client.Handshake() }()
	if err := server.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-handshake; err != nil {
		t.Fatal(err)
	}
	gw.SetDeadline(time.Time{}) // the alert's own 5 s is what the old cut waited for
	stream := newFramingConn(server, func(string) {})
	stream.switched.Store(true)
	h := (&hold{}).connection(&exchange{host: "api.example.test", port: 443}, false, stream)

	cut := make(chan struct{})
	go func() {
		h.cut(refuse(http.StatusForbidden, rule.ScopeMiss, "cut by the recheck: test", ""))
		close(cut)
	}()
	// The sandbox reads nothing until the cut has returned.
	select {
	case <-cut:
	case <-time.After(3 * time.Second):
		t.Fatal("the cut waited for the sandbox to read its TLS close alert (bounded by 3 s of its 5)")
	}
	if _, err := gw.Write([]byte{0}); err == nil {
		t.Fatal("the connection under the TLS stream is still open after the cut")
	}
	if h.cutBy() == nil {
		t.Fatal("the cut is not kept on its hold")
	}
}
