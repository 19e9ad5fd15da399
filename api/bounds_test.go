package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/slots"
)

// The attacks of these tests: one tenant holding the API's calls and connections open by every
// means it has (a slow body, a slow read of an answer, kept-alive connections that send
// nothing, connections that never authenticate), against the API as the node serves it
// (package slots' server on loopback). Each asserts the bound holds, says which setting, and
// that other tenants and reviewer keys are still served.

// bounds are what a boundEnv's API and server are given; zero fields take small test values.
type bounds struct {
	calls, streams slots.Limits
	conns          slots.Conns
	timeouts       slots.Timeouts
	// smallBuffers makes the server's socket send buffers small, so an answer the client does
	// not read stops the server's writes at once.
	smallBuffers bool
}

// boundEnv is the API of a pool whose downloads never end and whose listings are long,
// served on 127.0.0.1 with bounds; acme, globex and initech each hold a lease, and the
// reviewer key "key-secops" answers approvals of every tenant.
type boundEnv struct {
	t      *testing.T
	srv    *slots.Server
	api    *api.Server
	addr   string
	b      bounds
	leases map[string]string // tenant -> a lease of its
}

func newBoundEnv(t *testing.T, b bounds) *boundEnv {
	t.Helper()
	if b.calls.Max == 0 {
		b.calls = slots.Limits{Max: 16, PerIdentity: 2}
	}
	if b.streams.Max == 0 {
		b.streams = slots.Limits{Max: 16, PerIdentity: 2}
	}
	if b.conns.Max == 0 {
		b.conns = slots.Conns{Max: 64, PerAddress: 32}
	}
	if b.timeouts.Header == 0 {
		b.timeouts = slots.Timeouts{Header: 5 * time.Second, Body: 5 * time.Second, Stall: 5 * time.Second, Idle: 5 * time.Second}
	}
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{{MinWarm: 3, MaxTotal: 6}},
		Runtime: func(r *pooltest.Runtime) { r.ExecFunc = endlessFiles }})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := api.New(api.Config{Pool: e.Manager, Logger: quiet, Calls: b.calls, Streams: b.streams,
		Keys:      map[string]string{api.HashKey("key-acme"): "acme", api.HashKey("key-globex"): "globex", api.HashKey("key-initech"): "initech"},
		Reviewers: map[string]api.Reviewer{api.HashKey("key-secops"): {Name: "secops", Tenants: []string{"*"}}},
		Approvals: approval.New(approval.Config{})})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if b.smallBuffers {
		ln = smallBuffers{ln}
	}
	env := &boundEnv{t: t, api: h, addr: ln.Addr().String(), b: b, leases: map[string]string{}}
	env.srv = slots.NewServer(ln, slots.ServerConfig{Handler: h, Conns: b.conns, Timeouts: b.timeouts, Setting: "api", Refuse: h.Refuse})
	go env.srv.Serve()
	t.Cleanup(func() { env.srv.Close() })
	e.MustWarm(t, 3)
	for _, tenant := range []string{"acme", "globex", "initech"} {
		tok, _ := e.Issuer.Mint("task-"+tenant, tenant, []scope.Scope{{Host: "a.example"}}, time.Minute)
		st, out := env.call("127.0.0.9", "key-"+tenant, "POST", "/v1/leases", `{"token": "`+tok+`"}`)
		if st != http.StatusCreated {
			t.Fatalf("lease for %s: %d %v", tenant, st, out)
		}
		env.leases[tenant] = out["id"].(string)
	}
	return env
}

// endlessFiles stands in for the sandbox: a download never ends (it writes until its client is
// cut off), a listing holds 10000 entries (an answer of megabytes), anything else succeeds.
func endlessFiles(ctx context.Context, _ pool.Sandbox, req pool.ExecRequest, _ io.Reader, stdout, _ io.Writer) (int, error) {
	script := strings.Join(req.Cmd, " ")
	switch {
	case strings.Contains(script, "exec cat --"):
		chunk := make([]byte, 32<<10)
		for {
			if _, err := stdout.Write(chunk); err != nil {
				return -1, err
			}
			if err := ctx.Err(); err != nil {
				return -1, err
			}
		}
	case strings.Contains(script, "-mindepth 1"):
		for i := range pool.MaxListEntries {
			fmt.Fprintf(stdout, "f\x0010\x00644\x001.0\x00\x00/workspace/%s-%05d\x00", strings.Repeat("x", 100), i)
		}
	}
	return 0, nil
}

// smallBuffers gives each accepted connection a small send buffer.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// dialer dials from the loopback address from (each address is a client of its own to the
// server's per-address bound); small gives the connection a small receive buffer.
func dialer(from string, small bool) *net.Dialer {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	if small {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		}
	}
	return d
}

// call makes one call from the address from with key ("" for none), on a connection of its
// own closed after, and returns the status and the JSON answer; within 10 s.
func (e *boundEnv) call(from, key, method, path, body string) (int, map[string]any) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+e.addr+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: dialer(from, false).DialContext, DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s from %s with %q: %v", method, path, from, key, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		out["retry_after"] = ra
	}
	return resp.StatusCode, out
}

// served asserts that a call is answered with status.
func (e *boundEnv) served(from, key, method, path, body string, status int) {
	e.t.Helper()
	if st, out := e.call(from, key, method, path, body); st != status {
		e.t.Fatalf("%s %s from %s with %s: %d %v; want %d", method, path, from, key, st, out, status)
	}
}

// refusal checks an answer is a 429 of code with Retry-After, its message saying want.
func refusal(st int, out map[string]any, code, want string) error {
	e, _ := out["error"].(map[string]any)
	if st != http.StatusTooManyRequests || e["code"] != code || out["retry_after"] == nil || !strings.Contains(fmt.Sprint(e["message"]), want) {
		return fmt.Errorf("%d %v; want 429 %s saying %q, with Retry-After", st, out, code, want)
	}
	return nil
}

// refused asserts that a call is refused 429 with code, Retry-After and a message saying want.
func (e *boundEnv) refused(from, key, method, path, body, code, want string) {
	e.t.Helper()
	st, out := e.call(from, key, method, path, body)
	if err := refusal(st, out, code, want); err != nil {
		e.t.Fatalf("%s %s from %s with %q: %v", method, path, from, key, err)
	}
}

// dial connects from the address from, and sends nothing; the connection is closed when the
// test ends.
func (e *boundEnv) dial(from string) net.Conn {
	e.t.Helper()
	c, err := dialer(from, false).Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// open sends the head of a call on a connection of its own from the address from, with key
// and a body of size bytes of which it sends first; the connection is closed when the test
// ends. small: the connection reads its answer slowly (a small receive buffer, and nothing
// reads it).
func (e *boundEnv) open(from string, small bool, key, method, path string, size int, first string) net.Conn {
	e.t.Helper()
	c, err := dialer(from, small).Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	auth := ""
	if key != "" {
		auth = "Authorization: Bearer " + key + "\r\n"
	}
	if _, err := fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: api\r\n%sContent-Length: %d\r\n\r\n%s", method, path, auth, size, first); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// answer reads the answer on c, within 10 s: its status and JSON body.
func (e *boundEnv) answer(c net.Conn) (int, map[string]any) {
	e.t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		e.t.Fatalf("waiting 10s for an answer on %s: %v", c.LocalAddr(), err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	json.NewDecoder(resp.Body).Decode(&out)
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		out["retry_after"] = ra
	}
	return resp.StatusCode, out
}

// closed asserts that the server closes c within 10 s (after whatever it still sends).
func (e *boundEnv) closed(c net.Conn, what string) {
	e.t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, syscall.ECONNRESET) {
		err = nil
	}
	if err != nil {
		e.t.Fatalf("waiting 10s for the server to close %s: %v", what, err)
	}
}

// waitHeld waits until identity ("tenant:acme") holds n call slots (streams false) or stream
// slots: it looks at the server's bounds rather than calling, since a call made to see them held
// would take a slot of the very bound it waits on, and could make one of the calls it waits for
// be refused.
func (e *boundEnv) waitHeld(what string, streams bool, identity string, n int) {
	e.t.Helper()
	e.waitHeldFor(10*time.Second, what, streams, identity, n)
}

// waitHeldFor is waitHeld giving up after timeout.
func (e *boundEnv) waitHeldFor(timeout time.Duration, what string, streams bool, identity string, n int) {
	e.t.Helper()
	wait.For(e.t, timeout, what, func() bool { return api.Held(e.api, streams, identity) == n })
}
