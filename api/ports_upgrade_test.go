package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// upgradeEcho is a sandbox's service that switches each request to a raw stream (as a
// WebSocket does) and echoes every line on it until the connection ends.
func upgradeEcho(t *testing.T) (port int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					io.WriteString(c, line)
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// heldDestroy is a runtime whose destroys wait for hold: a released lease's sandbox runs on,
// as it does until the ender reaches it.
type heldDestroy struct {
	*pooltest.Runtime
	hold chan struct{}
}

func (r *heldDestroy) Destroy(ctx context.Context, id string) error {
	select {
	case <-r.hold:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.Runtime.Destroy(ctx, id)
}

// TestPortUpgradeEndsWithRelease: a connection through an exposed port that the sandbox's
// service upgraded (a WebSocket) ends when the lease is released, though the sandbox runs on
// until its end is finished: the release answers before the destroy, and from its answer
// nothing is to reach the sandbox. The port's server, which handed that connection off to the
// proxy, does not close it itself.
func TestPortUpgradeEndsWithRelease(t *testing.T) {
	hold := make(chan struct{})
	var rt *pooltest.Runtime
	e := pooltest.NewEnv(t, pooltest.EnvConfig{
		Runtime: func(r *pooltest.Runtime) { r.Addr = netip.MustParseAddr("127.0.0.1"); rt = r },
		Pool:    func(c *pool.Config) { c.Runtime = &heldDestroy{Runtime: rt, hold: hold} },
	})
	defer close(hold)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(api.New(api.Config{Pool: e.Manager, Logger: quiet, PortHost: "127.0.0.1",
		Keys: map[string]string{api.HashKey("k"): "acme"}}))
	defer srv.Close()
	e.MustWarm(t, 1)
	port := upgradeEcho(t)

	call := func(method, path, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode
	}
	tok, _ := e.Issuer.Mint("task-port-upgrade", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	var l api.LeaseView
	if st := call("POST", "/v1/leases", `{"token":"`+tok+`"}`, &l); st != http.StatusCreated {
		t.Fatalf("lease: %d", st)
	}
	var pv api.PortView
	if st := call("POST", "/v1/leases/"+l.ID+"/ports", `{"port":`+strconv.Itoa(port)+`}`, &pv); st != http.StatusCreated {
		t.Fatalf("expose: %d", st)
	}
	u, err := url.Parse(pv.URL)
	if err != nil {
		t.Fatal(err)
	}
	capability := u.Query()
	var secret, name string
	for k, v := range capability {
		name, secret = k, v[0]
	}
	cookie := name + "_" + u.Port() + "=" + secret

	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: "+u.Host+"\r\nCookie: "+cookie+"\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrading through the exposed port: %v, %v", resp, err)
	}
	echo := func(line string) error {
		if _, err := io.WriteString(c, line+"\n"); err != nil {
			return err
		}
		got, err := br.ReadString('\n')
		if err == nil && got != line+"\n" {
			t.Fatalf("the echo: %q, want %q", got, line)
		}
		return err
	}
	if err := echo("before"); err != nil {
		t.Fatalf("control: the upgraded connection does not carry: %v", err)
	}

	if st := call("DELETE", "/v1/leases/"+l.ID, "", nil); st != http.StatusNoContent && st != http.StatusOK {
		t.Fatalf("release: %d", st)
	}
	// The release answered; its sandbox's destroy is held, so its service still runs.
	err = echo("after")
	var ne net.Error
	if err == nil {
		t.Fatal("the released lease's sandbox still answers through its exposed port's upgraded connection")
	}
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the upgraded connection neither carried nor ended within 20 s of the release")
	}
}
