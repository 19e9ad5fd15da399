package vault

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vaultapi "github.com/hashicorp/vault/api"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/pool/redisstore"
)

// mintingVault is a dev Vault with what per-lease material needs: an orphan token role and a
// PKI mount with a client role. It returns the server and a root client of it.
func mintingVault(t *testing.T) (*devstack.Vault, *vaultapi.Client) {
	t.Helper()
	v := startVault(t)
	return v, setUpMinting(t, v)
}

func setUpMinting(t *testing.T, v *devstack.Vault) *vaultapi.Client {
	t.Helper()
	root, _ := vaultapi.NewClient(&vaultapi.Config{Address: v.Addr})
	root.SetToken(v.Token)
	root.Sys().PutPolicy("task-read", `path "secret/data/tasks/*" { capabilities = ["read"] }`)
	if _, err := root.Logical().Write("auth/token/roles/airlock-task", map[string]any{
		"allowed_policies": "task-read", "orphan": true, "token_explicit_max_ttl": "1h",
	}); err != nil {
		t.Fatal(err)
	}
	if err := root.Sys().Mount("pki", &vaultapi.MountInput{Type: "pki", Config: vaultapi.MountConfigInput{MaxLeaseTTL: "87600h"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().Write("pki/root/generate/internal", map[string]any{"common_name": "airlock test CA", "ttl": "87600h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().Write("pki/roles/task", map[string]any{"allow_any_name": true, "client_flag": true, "server_flag": false, "max_ttl": "1h"}); err != nil {
		t.Fatal(err)
	}
	return root
}

// mintingCatalog holds a per-lease token of ttl and a per-lease client certificate.
func mintingCatalog(t *testing.T, ttl time.Duration) broker.Catalog {
	t.Helper()
	cat, err := broker.NewCatalog([]broker.Entry{
		{Name: "task", Source: broker.Source{Kind: broker.SourceToken, Role: "airlock-task", Policies: []string{"task-read"}, TTL: ttl},
			Inject: broker.Injection{Kind: broker.InjectHeader, Header: "X-Vault-Token", Template: "{{.token}}"}, Hosts: []string{"vault.example"}},
		{Name: "mtls", Source: broker.Source{Kind: broker.SourcePKI, Role: "task", TTL: ttl},
			Inject: broker.Injection{Kind: broker.InjectClientCert}, Hosts: []string{"mtls.example"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// revoked reports whether Vault holds the certificate with this serial (decimal, as serialOf
// gives it) as revoked, from its own record of the certificate: a revocation writes it before
// answering, while the CRL is rebuilt beside it and was seen to lag a read made right after.
func revoked(t *testing.T, root *vaultapi.Client, serial string) bool {
	t.Helper()
	n, ok := new(big.Int).SetString(serial, 10)
	if !ok {
		t.Fatalf("serial %q", serial)
	}
	var hexes []string
	for _, x := range n.Bytes() {
		hexes = append(hexes, fmt.Sprintf("%02x", x))
	}
	s, err := root.Logical().Read("pki/cert/" + strings.Join(hexes, ":"))
	if err != nil || s == nil {
		t.Fatalf("reading certificate %s: %v", serial, err)
	}
	var at int64
	switch v := s.Data["revocation_time"].(type) {
	case json.Number:
		at, _ = v.Int64()
	case float64:
		at = int64(v)
	}
	return at > 0
}

// serialOf is the serial of the certificate in s, as the CRL writes it.
func serialOf(t *testing.T, s broker.Secret) string {
	t.Helper()
	cert, err := s.ClientCertificate()
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	return new(big.Int).Set(leaf.SerialNumber).String()
}

func tokenLive(root *vaultapi.Client, tok string) bool {
	_, err := root.Auth().Token().Lookup(tok)
	return err == nil
}

// recSink keeps the records written to it.
type recSink struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (s *recSink) Write(_ context.Context, r audit.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r)
	return nil
}

func (s *recSink) events(lease string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.recs {
		if r.Lease == lease {
			out = append(out, string(r.Event)+" "+r.Credential+": "+r.Reason)
		}
	}
	return out
}

// TestNearTheEndOneItem: a lease with seconds left used to get a new token or certificate on
// every request (the reuse margin was longer than what it minted), and only the last was
// revoked. Now what is minted lives to the lease's end and serves every request until then, and
// release revokes it: one certificate, on the CRL.
func TestNearTheEndOneItem(t *testing.T) {
	v, root := mintingVault(t)
	sink := &recSink{}
	b, _ := New(Config{Address: v.Addr, Token: v.Token, Audit: sink})
	ctx := context.Background()
	if err := b.Login(ctx); err != nil {
		t.Fatal(err)
	}
	cat := mintingCatalog(t, 10*time.Minute)
	// Seconds left, but more than the 2 s under which Vault no longer lists a certificate.
	l := broker.Lease{ID: "l-end", Expires: time.Now().Add(6 * time.Second)}
	serials, tokens := map[string]bool{}, map[string]bool{}
	for range 3 {
		c, err := b.Get(ctx, l, cat["mtls"])
		if err != nil {
			t.Fatal(err)
		}
		serials[serialOf(t, c)] = true
		tok, err := b.Get(ctx, l, cat["task"])
		if err != nil {
			t.Fatal(err)
		}
		tokens[tok["token"]] = true
	}
	if len(serials) != 1 || len(tokens) != 1 || b.minted.Load() != 2 {
		t.Fatalf("three requests near the lease's end minted %d certificates and %d tokens", len(serials), len(tokens))
	}
	if err := b.Release(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	for s := range serials {
		if !revoked(t, root, s) {
			t.Errorf("certificate %s is not on the CRL after release", s)
		}
	}
	for tok := range tokens {
		if tokenLive(root, tok) {
			t.Error("the token survived the release")
		}
	}

	// Within 2 s of its end Vault answers a revocation with a warning and lists nothing; the
	// record says so instead of claiming a revocation.
	short := broker.Lease{ID: "l-last-second", Expires: time.Now().Add(1500 * time.Millisecond)}
	c, err := b.Get(ctx, short, cat["mtls"])
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, short.ID); err != nil {
		t.Fatal(err)
	}
	if revoked(t, root, serialOf(t, c)) {
		t.Error("Vault listed a certificate with under 2 s left; the broker's reading of its answer needs a look")
	}
	ev := sink.events(short.ID)
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "revoke-expired mtls: ") || !strings.Contains(ev[0], "does not list as revoked") {
		t.Errorf("records of the last-second certificate: %q", ev)
	}
	for _, e := range sink.events(l.ID) {
		if !strings.HasPrefix(e, "revoke ") {
			t.Errorf("the listed certificate and the token were recorded as %q", e)
		}
	}
}

// TestReplacedMaterialRevoked: material minted anew because the old one reached its refresh
// window does not replace the old without revoking it. The broker's clock is moved to the
// window, so the old material, which Vault would keep for minutes yet, is
// revoked, not expired.
func TestReplacedMaterialRevoked(t *testing.T) {
	v, root := mintingVault(t)
	b, _ := New(Config{Address: v.Addr, Token: v.Token})
	var skew atomic.Int64
	b.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := b.Login(ctx); err != nil {
		t.Fatal(err)
	}
	go b.Run(ctx)
	cat := mintingCatalog(t, 10*time.Minute)
	l := broker.Lease{ID: "l-rot", Expires: time.Now().Add(time.Hour)}
	first, err := b.Get(ctx, l, cat["task"])
	if err != nil {
		t.Fatal(err)
	}
	firstCert, err := b.Get(ctx, l, cat["mtls"])
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := b.Get(ctx, l, cat["task"]); again["token"] != first["token"] {
		t.Fatal("control: a second request minted a new token outside the refresh window")
	}
	skew.Store(int64(10*time.Minute - 2*time.Second)) // inside the last 5s of both
	second, err := b.Get(ctx, l, cat["task"])
	if err != nil || second["token"] == first["token"] {
		t.Fatalf("in its refresh window the token was not minted anew: %v", err)
	}
	secondCert, err := b.Get(ctx, l, cat["mtls"])
	if err != nil || serialOf(t, secondCert) == serialOf(t, firstCert) {
		t.Fatalf("in its refresh window the certificate was not issued anew: %v", err)
	}
	waitFor(t, 10*time.Second, "the replaced token and certificate to be revoked", func() bool {
		return !tokenLive(root, first["token"]) && revoked(t, root, serialOf(t, firstCert))
	})
	if !tokenLive(root, second["token"]) || revoked(t, root, serialOf(t, secondCert)) {
		t.Fatal("the new token or certificate was revoked with the old")
	}
	if err := b.Release(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	if tokenLive(root, second["token"]) || !revoked(t, root, serialOf(t, secondCert)) {
		t.Fatal("the new token or certificate survived the release")
	}
}

// TestSwapRevokesAndMintsAgain: Revoke (a token swap) revokes what the lease has and lets it
// mint again; Release ends it.
func TestSwapRevokesAndMintsAgain(t *testing.T) {
	v, root := mintingVault(t)
	b, _ := New(Config{Address: v.Addr, Token: v.Token})
	ctx := context.Background()
	if err := b.Login(ctx); err != nil {
		t.Fatal(err)
	}
	cat := mintingCatalog(t, 10*time.Minute)
	l := broker.Lease{ID: "l-swap"}
	before, err := b.Get(ctx, l, cat["task"])
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Revoke(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	if tokenLive(root, before["token"]) {
		t.Fatal("the token minted before the swap survived it")
	}
	after, err := b.Get(ctx, l, cat["task"])
	if err != nil || after["token"] == before["token"] || !tokenLive(root, after["token"]) {
		t.Fatalf("after the swap the lease cannot mint: %v", err)
	}
	b.Release(ctx, l.ID)
	if _, err := b.Get(ctx, l, cat["task"]); err == nil {
		t.Fatal("a released lease minted again")
	}
}

// outage is a TCP relay in front of Vault that can be taken down and brought back, so the
// broker sees Vault vanish from the network while the server keeps its state.
type outage struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func newOutage(t *testing.T, target string) *outage {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &outage{ln: ln, target: strings.TrimPrefix(target, "http://")}
	t.Cleanup(func() { ln.Close(); o.setDown(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.mu.Lock()
			if o.down {
				o.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", o.target)
			if err != nil {
				o.mu.Unlock()
				c.Close()
				continue
			}
			o.conns = append(o.conns, c, up)
			o.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return o
}

func (o *outage) addr() string { return "http://" + o.ln.Addr().String() }

// setDown cuts every open connection when it goes down.
func (o *outage) setDown(down bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = down
	if down {
		for _, c := range o.conns {
			c.Close()
		}
		o.conns = nil
	}
}

// TestRevocationRetriedUntilVaultAnswers: with Vault unreachable at release, the revocations are
// kept and retried with backoff (the backlog shows them) and go through once Vault is back,
// each recorded; one that keeps failing past RetryFor is given up and recorded as such.
func TestRevocationRetriedUntilVaultAnswers(t *testing.T) {
	v, root := mintingVault(t)
	o := newOutage(t, v.Addr)
	sink := &recSink{}
	b, _ := New(Config{Address: o.addr(), Token: v.Token, Audit: sink, Node: "n1"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := b.Login(ctx); err != nil {
		t.Fatal(err)
	}
	go b.Run(ctx)
	cat := mintingCatalog(t, 10*time.Minute)
	l := broker.Lease{ID: "l-out", Tenant: "acme", Task: "task-1"}
	tok, err := b.Get(ctx, l, cat["task"])
	if err != nil {
		t.Fatal(err)
	}
	cert, err := b.Get(ctx, l, cat["mtls"])
	if err != nil {
		t.Fatal(err)
	}
	o.setDown(true)
	err = b.Release(ctx, l.ID)
	if err == nil || !strings.Contains(err.Error(), "2 of 2 revocations") || !strings.Contains(err.Error(), "retried until Vault answers") {
		t.Fatalf("release with Vault unreachable = %v", err)
	}
	if n := b.Backlog(); n != 2 {
		t.Fatalf("backlog %d, want 2", n)
	}
	if !tokenLive(root, tok["token"]) {
		t.Fatal("control: the token died although no revocation reached Vault")
	}
	waitFor(t, 20*time.Second, "the revoker to retry each revocation with Vault still down", func() bool {
		b.revs.mu.Lock()
		defer b.revs.mu.Unlock()
		for _, p := range b.revs.pending {
			if p.attempts < 2 {
				return false
			}
		}
		return true
	})
	o.setDown(false)
	waitFor(t, 30*time.Second, "the backlog to drain once Vault is back", func() bool { return b.Backlog() == 0 })
	if tokenLive(root, tok["token"]) {
		t.Fatal("the token survived its retried revocation")
	}
	if !revoked(t, root, serialOf(t, cert)) {
		t.Fatal("the certificate is not on the CRL after its retried revocation")
	}
	revokes := 0
	for _, e := range sink.events(l.ID) {
		if strings.HasPrefix(e, "revoke ") && strings.Contains(e, "attempts") {
			revokes++
		}
	}
	if revokes != 2 {
		t.Fatalf("records of the retried revocations: %q", sink.events(l.ID))
	}
	sink.mu.Lock()
	if r := sink.recs[0]; r.Tenant != "acme" || r.Task != "task-1" || r.Node != "n1" || r.Kind != audit.KindLease {
		t.Errorf("a revocation record names %+v", r)
	}
	sink.mu.Unlock()

	// Past RetryFor it is given up, and said so.
	g, _ := New(Config{Address: o.addr(), Token: v.Token, Audit: sink, RetryFor: time.Second})
	gctx, gcancel := context.WithCancel(ctx)
	defer gcancel()
	g.Login(gctx)
	go g.Run(gctx)
	if _, err := g.Get(gctx, broker.Lease{ID: "l-lost"}, cat["task"]); err != nil {
		t.Fatal(err)
	}
	o.setDown(true)
	g.Release(gctx, "l-lost")
	waitFor(t, 30*time.Second, "the revocation to be given up", func() bool { return g.Backlog() == 0 })
	if ev := sink.events("l-lost"); len(ev) != 1 || !strings.HasPrefix(ev[0], "revoke-abandoned task: gave up revoking") {
		t.Fatalf("records of the abandoned revocation: %q", ev)
	}
}

// TestJournalRevokesAfterRestart: what a broker minted and never revoked (the node was killed)
// is in the journal, in Redis, and the broker of the next run revokes it.
func TestJournalRevokesAfterRestart(t *testing.T) {
	v, root := mintingVault(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := devstack.StartRedis(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("redis-server: %v (make test installs it)", err)
	}
	defer r.Stop()
	opts, _ := redis.ParseURL(r.URL)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	journal := redisstore.New(rdb, "t:").Journal("minted:n1")
	cat := mintingCatalog(t, 10*time.Minute)

	first, _ := New(Config{Address: v.Addr, Token: v.Token, Journal: journal})
	if err := first.Login(ctx); err != nil {
		t.Fatal(err)
	}
	l := broker.Lease{ID: "l-crash"}
	tok, err := first.Get(ctx, l, cat["task"])
	if err != nil {
		t.Fatal(err)
	}
	cert, err := first.Get(ctx, l, cat["mtls"])
	if err != nil {
		t.Fatal(err)
	}
	if all, _ := journal.All(ctx); len(all) != 2 {
		t.Fatalf("the journal holds %d items, want 2", len(all))
	}
	for _, v := range mustAll(t, journal) {
		if strings.Contains(string(v), tok["token"]) || strings.Contains(string(v), "PRIVATE KEY") {
			t.Fatal("the journal holds a secret value")
		}
	}
	// The first broker is gone without a release; the next one takes its journal over.
	sink := &recSink{}
	next, _ := New(Config{Address: v.Addr, Token: v.Token, Journal: journal, Audit: sink})
	if err := next.Login(ctx); err != nil {
		t.Fatal(err)
	}
	go next.Run(ctx)
	waitFor(t, 30*time.Second, "the next run to revoke what the first left", func() bool {
		return !tokenLive(root, tok["token"]) && len(mustAll(t, journal)) == 0
	})
	if !revoked(t, root, serialOf(t, cert)) {
		t.Fatal("the first run's certificate is not on the CRL")
	}
	if ev := sink.events(l.ID); len(ev) != 2 {
		t.Fatalf("records of the recovered revocations: %q", ev)
	}
}

func mustAll(t *testing.T, j Journal) map[string][]byte {
	t.Helper()
	all, err := j.All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// failingJournal refuses every write.
type failingJournal struct{ memJournal }

func (*failingJournal) Put(context.Context, string, []byte) error { return errors.New("journal down") }

// TestUnrecordedMaterialNotHandedOut: material that could not be recorded is revoked at once
// and the request refused, so nothing minted escapes the journal.
func TestUnrecordedMaterialNotHandedOut(t *testing.T) {
	v, root := mintingVault(t)
	b, _ := New(Config{Address: v.Addr, Token: v.Token, Journal: &failingJournal{memJournal{m: map[string][]byte{}}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := b.Login(ctx); err != nil {
		t.Fatal(err)
	}
	go b.Run(ctx)
	cat := mintingCatalog(t, 10*time.Minute)
	_, err := b.Get(ctx, broker.Lease{ID: "l-nojournal"}, cat["task"])
	if !errors.Is(err, broker.ErrUnavailable) || !strings.Contains(err.Error(), "recording what was minted failed") {
		t.Fatalf("Get with the journal down = %v", err)
	}
	live := func() int {
		s, err := root.Logical().List("auth/token/accessors")
		if err != nil || s == nil {
			return 0
		}
		n := 0
		keys, _ := s.Data["keys"].([]any)
		for _, k := range keys {
			info, err := root.Auth().Token().LookupAccessor(k.(string))
			if err != nil {
				continue
			}
			if md, _ := info.Data["meta"].(map[string]any); md != nil && md["airlock_lease"] == "l-nojournal" {
				n++
			}
		}
		return n
	}
	waitFor(t, 10*time.Second, "the unrecorded token to be revoked", func() bool { return live() == 0 })
}
