package api_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/slots"
)

// streamEnv is an API whose commands run until their call ends, bounded to 4 calls held open,
// 2 per tenant; acme's two keys are one tenant.
type streamEnv struct {
	t      *testing.T
	srv    *httptest.Server
	leases map[string]string // tenant -> a lease of its
}

func newStreamEnv(t *testing.T) *streamEnv {
	t.Helper()
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{{MinWarm: 3, MaxTotal: 6}},
		Runtime: func(r *pooltest.Runtime) {
			r.ExecFunc = func(ctx context.Context, _ pool.Sandbox, _ pool.ExecRequest, stdin io.Reader, stdout, _ io.Writer) (int, error) {
				if stdin != nil {
					io.Copy(io.Discard, stdin) // an upload's body read, so its call ends when its client goes
				}
				io.WriteString(stdout, "running\n")
				<-ctx.Done()
				return -1, ctx.Err()
			}
		}})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(api.New(api.Config{Pool: e.Manager, Logger: quiet, Streams: slots.Limits{Max: 4, PerIdentity: 2},
		Keys: map[string]string{api.HashKey("key-acme"): "acme", api.HashKey("key-acme-2"): "acme",
			api.HashKey("key-globex"): "globex", api.HashKey("key-initech"): "initech"}}))
	t.Cleanup(srv.Close)
	e.MustWarm(t, 3)
	s := &streamEnv{t: t, srv: srv, leases: map[string]string{}}
	for _, tenant := range []string{"acme", "globex", "initech"} {
		tok, _ := e.Issuer.Mint("task-"+tenant, tenant, []scope.Scope{{Host: "a.example"}}, time.Minute)
		resp := s.call(context.Background(), "key-"+tenant, "POST", "/v1/leases", `{"token": "`+tok+`"}`)
		var l api.LeaseView
		json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("lease for %s: %d", tenant, resp.StatusCode)
		}
		s.leases[tenant] = l.ID
	}
	return s
}

func (s *streamEnv) call(ctx context.Context, key, method, path, body string) *http.Response {
	s.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, s.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s with %s: %v", method, path, key, err)
	}
	return resp
}

// hold starts a command in tenant's lease with key and returns once its output streams; the
// call stays open until the returned function ends it.
func (s *streamEnv) hold(key, tenant string) (end func()) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp := s.call(ctx, key, "POST", "/v1/leases/"+s.leases[tenant]+"/exec", `{"cmd": ["sleep", "infinity"]}`)
	var hdr [8]byte
	if _, err := io.ReadFull(resp.Body, hdr[:]); resp.StatusCode != http.StatusOK || err != nil || hdr[0] != api.StreamStdout ||
		binary.BigEndian.Uint32(hdr[4:]) == 0 {
		cancel()
		s.t.Fatalf("exec with %s: %d %v, first frame %v", key, resp.StatusCode, err, hdr)
	}
	end = func() { cancel(); resp.Body.Close() }
	s.t.Cleanup(end)
	return end
}

// refused asserts that the call is refused with 429, Retry-After, and a message naming want.
func (s *streamEnv) refused(key, method, path, body, want string) {
	s.t.Helper()
	// Bounded: a call let through would run a command that never ends.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := s.call(ctx, key, method, path, body)
	defer resp.Body.Close()
	var out struct {
		Error struct{ Code, Message string }
	}
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusTooManyRequests || out.Error.Code != "too_many_streams" || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(out.Error.Message, want) {
		s.t.Fatalf("%s %s with %s: %d %q %+v; want 429 too_many_streams naming %q, with Retry-After", method, path, key,
			resp.StatusCode, resp.Header.Get("Retry-After"), out.Error, want)
	}
}

// One tenant cannot hold every call the node keeps open, whichever of its keys it uses and
// whatever kind of call it holds; another tenant still gets its share, and a call that ends
// frees its slot.
func TestStreamsBoundedPerTenant(t *testing.T) {
	s := newStreamEnv(t)
	acme := s.leases["acme"]
	first := s.hold("key-acme", "acme")
	s.hold("key-acme-2", "acme") // the same tenant through its other key
	for _, c := range []struct{ name, method, path, body string }{
		{"a third command", "POST", "/v1/leases/" + acme + "/exec", `{"cmd": ["true"]}`},
		{"a process's output", "GET", "/v1/leases/" + acme + "/processes/p-1/output?wait=30s", ""},
		{"a process's end", "GET", "/v1/leases/" + acme + "/processes/p-1/wait?timeout=30s", ""},
		{"a file", "GET", "/v1/leases/" + acme + "/files?path=x", ""},
		{"a file upload", "PUT", "/v1/leases/" + acme + "/files?path=x", "data"},
		{"an audit page", "GET", "/v1/audit", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.t = t
			s.refused("key-acme", c.method, c.path, c.body, "tenant acme already holds 2 calls open on this node")
			s.refused("key-acme-2", c.method, c.path, c.body, "api.streams.per_identity")
		})
	}
	t.Run("other tenants keep theirs, up to the node's bound", func(t *testing.T) {
		s.t = t
		s.hold("key-globex", "globex")
		s.hold("key-globex", "globex")
		s.refused("key-initech", "POST", "/v1/leases/"+s.leases["initech"]+"/exec", `{"cmd": ["true"]}`, "api.streams.max")
	})
	t.Run("a call that ends gives its slot back", func(t *testing.T) {
		s.t = t
		first()
		wait.For(t, 10*time.Second, "acme's ended command to free its slot", func() bool {
			resp := s.call(context.Background(), "key-acme", "GET", "/v1/audit", "")
			resp.Body.Close()
			return resp.StatusCode != http.StatusTooManyRequests
		})
		s.hold("key-acme", "acme")
	})
}
