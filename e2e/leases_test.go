package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestLeasesExclusiveAndEphemeral attacks invariant 6: one token binds one lease, a token swap
// cannot move a lease to another task, a renewal never outlives the token, and a lease that
// ends, by release or expiry, takes its sandbox and its Vault token with it.
func TestLeasesExclusiveAndEphemeral(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {

		t.Run("one token binds one lease", func(t *testing.T) {
			tok := mintToken(t, "task-once", []map[string]any{{"host": "api.example.test"}}, 10*time.Minute)
			n.leaseWith(t, "--token", tok)
			if code, errs := n.leaseRefused(t, "--token", tok); code == 0 || !strings.Contains(errs, "jti") {
				t.Fatalf("second lease with one jti: exit %d %s", code, errs)
			}
		})

		t.Run("a token swap narrows at once and cannot change the task", func(t *testing.T) {
			tok := mintToken(t, "task-jwt", []map[string]any{{"host": "api.example.test"}}, 10*time.Minute)
			l := n.leaseWith(t, "--token", tok)
			if out, _, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 || !strings.Contains(out, "whoami ok") {
				t.Fatalf("control: before the swap the scope does not work: %s", out)
			}
			cl := n.goClient()
			narrow := mintToken(t, "task-jwt", []map[string]any{{"host": "other.example"}}, 10*time.Minute)
			if _, err := cl.SwapToken(context.Background(), l.ID, narrow); err != nil {
				t.Fatalf("token swap: %v", err)
			}
			out, _, _ := n.exec(t, l.ID, "curl", "-sS", "http://api.example.test/whoami")
			if !strings.Contains(out, "scope-miss") {
				t.Fatalf("after the swap the old scope still works: %s", out)
			}
			if _, err := cl.SwapToken(context.Background(), l.ID, mintToken(t, "another-task", nil, time.Minute)); err == nil || !strings.Contains(err.Error(), "is for task") {
				t.Fatalf("swap to another task's token = %v", err)
			}
		})

		t.Run("a renewal is capped by the token", func(t *testing.T) {
			a := n.leaseWith(t, "--token", mintToken(t, "task-renew", []map[string]any{{"host": "api.example.test"}}, 10*time.Minute))
			renew := func(ttl string) time.Time {
				t.Helper()
				out, errs, code := n.cli(t, "renew", a.ID, "--ttl", ttl, "--json")
				var l struct{ Expires time.Time }
				if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
					t.Fatalf("renew %s: exit %d %s %s", ttl, code, out, errs)
				}
				return l.Expires
			}
			if exp := renew("5m"); time.Until(exp) < 4*time.Minute || time.Until(exp) > 5*time.Minute {
				t.Fatalf("renew 5m: expires in %s", time.Until(exp))
			}
			// The token lives 10m from the lease: a renewal never carries the lease past it.
			if exp := renew("1h"); time.Until(exp) > 10*time.Minute {
				t.Fatalf("renew 1h outlived the token: expires in %s", time.Until(exp))
			}
			if kinds := n.logKinds(t, a.ID, "lease/renew"); !kinds["lease/renew"] {
				t.Errorf("logs --lease lacks the renewal (have %v)", kinds)
			}
		})

		t.Run("a lease that expires mid-task loses its Vault token", func(t *testing.T) {
			l := n.lease(t, "api.example.test=vault-task")
			// Shorten it: renew to 8s from now (long enough to use it under load, short to wait).
			if _, errs, code := n.cli(t, "renew", l.ID, "--ttl", "8s"); code != 0 {
				t.Fatalf("renew: %s", errs)
			}
			if _, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 {
				t.Fatalf("curl: %s", errs)
			}
			tok := n.up.lastVaultToken(t)
			root := n.vaultClient(t)
			if _, err := root.Auth().Token().Lookup(tok); err != nil {
				t.Fatalf("the task token is not live: %v", err)
			}
			// Revoked by the reaper, or expired with the lease.
			eventually(t, 20*time.Second, "the expired lease's Vault token to die", func() bool {
				_, err := root.Auth().Token().Lookup(tok)
				return err != nil
			})
			if _, errs, code := n.exec(t, l.ID, "true"); code == 0 || !(strings.Contains(errs, "lease_not_found") || strings.Contains(errs, "expired")) {
				t.Fatalf("the expired lease still runs commands: %s", errs)
			}
		})

		t.Run("a client that hangs up right after DELETE does not cut the release short", func(t *testing.T) {
			l := n.lease(t, "api.example.test=vault-task")
			if _, errs, code := n.exec(t, l.ID, "curl", "-sS", "https://api.example.test/whoami"); code != 0 {
				t.Fatalf("curl: %s", errs)
			}
			tok := n.up.lastVaultToken(t)
			root := n.vaultClient(t)
			if _, err := root.Auth().Token().Lookup(tok); err != nil {
				t.Fatalf("control: the task token is not live: %v", err)
			}
			u, _ := url.Parse(n.client.Addr)
			c, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "DELETE /v1/leases/%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", l.ID, u.Host, n.client.Token)
			c.Close() // gone before any answer
			eventually(t, 30*time.Second, "the sandbox to be destroyed and the task token revoked", func() bool {
				_, inspectErr := docker("inspect", l.Sandbox)
				_, lookupErr := root.Auth().Token().Lookup(tok)
				return inspectErr != nil && lookupErr != nil
			})
			if kinds := n.logKinds(t, l.ID, "lease/release"); !kinds["lease/release"] {
				t.Errorf("no release record (have %v)", kinds)
			}
		})

		t.Run("release destroys the sandbox and the pool refills", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			if _, errs, code := n.cli(t, "release", a.ID); code != 0 {
				t.Fatalf("release: %s", errs)
			}
			// The release answers before its sandbox is destroyed; the lease's records are
			// served once its end is over.
			if _, errs, code := n.cli(t, "logs", "--lease", a.ID, "--json"); code != 0 {
				t.Fatalf("logs --lease: %s", errs)
			}
			if out, err := docker("inspect", a.Sandbox); err == nil || !strings.Contains(strings.ToLower(out), "no such") {
				t.Fatalf("container %s still exists after release: %s", a.Sandbox[:12], out)
			}
			if _, errs, code := n.exec(t, a.ID, "true"); code == 0 || !strings.Contains(errs, "lease_not_found") {
				t.Fatalf("exec on a released lease: exit %d, %s", code, errs)
			}
			var out string
			if err := waitUntil(90*time.Second, "the pool to refill to its target with nothing leased", func() bool {
				p, ok, all := n.settled(t, "default")
				out = all
				return ok && p.Leased == 0
			}); err != nil {
				t.Fatalf("%v; airlock pools says:\n%s", err, out)
			}
		})
	})
}
