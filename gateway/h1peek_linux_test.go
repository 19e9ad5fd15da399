package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// An idle connection the upstream has closed, or sent something unasked on, is not used: a
// request that may not be sent twice goes on a new connection, and nothing unasked is taken
// for its answer.
func TestH1IdleNotQuiet(t *testing.T) {
	for _, tc := range []struct{ name, after string }{{"closed", ""}, {"unasked answer", "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"}} {
		t.Run(tc.name, func(t *testing.T) {
			u := newRawUpstream(t, func(conn, n int, r *http.Request, c net.Conn) bool {
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nc%d", conn)
				if conn > 1 {
					return true
				}
				if tc.after == "" {
					c.Close()
				} else {
					io.WriteString(c, tc.after)
				}
				return false
			})
			h := testH1(nil)
			resp, err := h1Get(t, h, context.Background(), "POST", "http://"+u.addr+"/")
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			// Wait until the upstream's close or bytes reach the idle connection's socket (unless
			// the bytes came with the answer: then the connection was not kept at all).
			h.pool.mu.Lock()
			var idle net.Conn
			for _, cs := range h.pool.idle {
				idle = cs[0].conn
			}
			h.pool.mu.Unlock()
			if idle != nil {
				waitReadable(t, idle)
				if quiet(idle) {
					t.Fatal("an idle connection with something to read counts as quiet")
				}
			}
			resp, err = h1Get(t, h, context.Background(), "POST", "http://"+u.addr+"/")
			if err != nil {
				t.Fatal(err)
			}
			if body := readAll(t, resp); body != "c2" {
				t.Fatalf("second POST: %q, want the answer on a new connection", body)
			}
		})
	}
}

// waitReadable waits, without reading, until c's socket has something to read.
func waitReadable(t *testing.T, c net.Conn) {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return err != syscall.EAGAIN
	}); err != nil {
		t.Fatalf("waited 10s for the upstream's close or bytes to reach the idle connection: %v", err)
	}
}
