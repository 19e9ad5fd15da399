package api_test

import (
	"context"
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
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

type apiNode struct {
	m   *pool.Manager
	rt  *pooltest.Runtime
	srv *httptest.Server
	env *pooltest.Env
}

// Nodes trust only nodes: a tenant's routing header is never believed, a forwarded call is
// signed with the deployment's node secret, and a node never acts on another node's lease.
func TestNodesTrustOnlyNodes(t *testing.T) {
	ctx := context.Background()
	base := pooltest.NewEnv(t, pooltest.EnvConfig{Node: "n0", NoRun: true})
	store := base.Store
	secret, _ := store.NodeSecret(ctx)
	iss := base.Issuer
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	keys := map[string]string{api.HashKey("key-acme"): "acme"}
	start := func(name string, warm int, secret []byte) *apiNode {
		n := &apiNode{srv: httptest.NewUnstartedServer(nil)}
		e := pooltest.NewEnv(t, pooltest.EnvConfig{Node: name, Store: store, Templates: []pool.Template{{MinWarm: warm, MaxTotal: 4}},
			Pool: func(c *pool.Config) {
				c.Verify, c.API = base.Verifier.VerifyFor, "http://"+n.srv.Listener.Addr().String()
			}})
		n.m, n.rt, n.env = e.Manager, e.Runtime, e
		n.srv.Config.Handler = api.New(api.Config{Pool: n.m, Logger: quiet, Keys: keys, NodeAuth: &api.NodeAuth{Node: name, Secret: secret}})
		n.srv.Start()
		t.Cleanup(n.srv.Close)
		return n
	}
	a := start("n1", 0, secret)
	b := start("n2", 2, secret)
	b.env.MustWarm(t, 2)
	call := func(n *apiNode, method, path, body string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(method, n.srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer key-acme")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	lease := func() string {
		tok, _ := iss.Mint("task", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
		st, body := call(a, "POST", "/v1/leases", `{"token": "`+tok+`"}`, nil)
		var l api.LeaseView
		json.Unmarshal([]byte(body), &l)
		if st != 201 || l.Node != "n2" {
			t.Fatalf("lease through n1: %d %s", st, body)
		}
		return l.ID
	}
	stillThere := func(id string) bool {
		_, err := store.GetLease(ctx, id)
		return err == nil
	}

	// The attack: DELETE at a node that does not hold the lease, claiming to be routed. The header
	// is dropped unread, so n1 forwards the call to n2, which releases the lease properly.
	id := lease()
	l, _ := store.GetLease(ctx, id)
	for _, forged := range []map[string]string{
		{api.RoutedHeader: "n2"},
		{api.RoutedHeader: "n2", api.NodeSignatureHeader: "t=1,s=00"},
	} {
		if st, body := call(a, "GET", "/v1/leases/"+id, "", forged); st != 200 {
			t.Fatalf("GET with a forged routing header: %d %s", st, body)
		}
		if a.rt.Destroyed(l.Sandbox.ID) {
			t.Fatal("n1 acted on n2's sandbox")
		}
	}
	if st, body := call(a, "DELETE", "/v1/leases/"+id, "", map[string]string{api.RoutedHeader: "n2"}); st != 204 {
		t.Fatalf("release through n1 with a forged header: %d %s", st, body)
	}
	if err := b.m.AwaitEnd(ctx, "acme", id); err != nil { // the release answers before the destroy
		t.Fatal(err)
	}
	if !b.rt.Destroyed(l.Sandbox.ID) || a.rt.Destroyed(l.Sandbox.ID) || stillThere(id) {
		t.Fatalf("the owner did not release it (n2 destroyed %v, n1 destroyed %v, record left %v)",
			b.rt.Destroyed(l.Sandbox.ID), a.rt.Destroyed(l.Sandbox.ID), stillThere(id))
	}

	// A correctly signed call that reaches a node not holding the lease is refused there, not
	// carried out and not forwarded again.
	id = lease()
	l, _ = store.GetLease(ctx, id)
	req := httptest.NewRequest("DELETE", "/v1/leases/"+id, nil)
	req.Header.Set("Authorization", "Bearer key-acme")
	(&api.NodeAuth{Node: "n2", Secret: secret}).Sign(req)
	st, body := call(a, "DELETE", "/v1/leases/"+id, "", map[string]string{
		api.RoutedHeader: req.Header.Get(api.RoutedHeader), api.NodeSignatureHeader: req.Header.Get(api.NodeSignatureHeader)})
	if st != http.StatusConflict || !strings.Contains(body, "not_owner") {
		t.Fatalf("signed call at the wrong node: %d %s", st, body)
	}
	if !stillThere(id) || a.rt.Destroyed(l.Sandbox.ID) || b.rt.Destroyed(l.Sandbox.ID) {
		t.Fatal("a call at the wrong node changed the lease")
	}

	// A node without the deployment's secret neither forwards nor is believed.
	c := start("n3", 0, nil)
	if st, body := call(c, "DELETE", "/v1/leases/"+id, "", map[string]string{api.RoutedHeader: "n2"}); st != http.StatusServiceUnavailable {
		t.Fatalf("release through a node with no secret: %d %s", st, body)
	}
	if !stillThere(id) {
		t.Fatal("a node with no secret released another node's lease")
	}
}
