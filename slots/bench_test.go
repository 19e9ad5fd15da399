package slots

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The cost of the bounds on a call: a small JSON POST and its answer on a kept-alive
// connection, through Server and through a bare http.Server, over loopback.
func BenchmarkCall(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})
	for _, tc := range []struct {
		name  string
		serve func(net.Listener) func()
	}{
		{"bounded", func(ln net.Listener) func() {
			s := NewServer(ln, ServerConfig{Handler: h, Conns: Conns{Max: 64, PerAddress: 32}, Setting: "bench",
				Timeouts: Timeouts{Header: 10 * time.Second, Body: 30 * time.Second, Stall: time.Minute, Idle: 2 * time.Minute}})
			go s.Serve()
			return func() { s.Close() }
		}},
		{"bare", func(ln net.Listener) func() {
			s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			go s.Serve(ln)
			return func() { s.Close() }
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer tc.serve(ln)()
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			url := "http://" + ln.Addr().String() + "/"
			for b.Loop() {
				resp, err := c.Post(url, "application/json", strings.NewReader(`{"lease":"l-1","url":"https://a.example/"}`))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
