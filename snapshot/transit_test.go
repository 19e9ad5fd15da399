package snapshot_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/snapshot"
)

// The tests of Transit, and of the Catalog over it, run against a real Vault dev server, in
// this package of their own: devstack, which starts Vault, imports package snapshot.

// startTestVault runs a real Vault dev server from bin/vault (built by `make vault`), with the
// transit engine mounted as devstack mounts it.
func startTestVault(t testing.TB) *devstack.Vault {
	t.Helper()
	bin, _ := filepath.Abs("../bin/vault")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run the tests with `make test`, which builds a real Vault", bin)
	}
	ctx, cancel := context.WithCancel(context.Background())
	v, err := devstack.StartVault(ctx, bin, t.TempDir())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); v.Stop() })
	return v
}

// newTestTransit returns a Transit of v's transit engine.
func newTestTransit(t testing.TB, v *devstack.Vault) *snapshot.Transit {
	t.Helper()
	c, err := v.Client()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := snapshot.NewTransit(snapshot.TransitConfig{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// transitKeys lists the keys of v's transit engine.
func transitKeys(t *testing.T, v *devstack.Vault) []string {
	t.Helper()
	c, _ := v.Client()
	s, err := c.Logical().List(devstack.TransitMount + "/keys")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if s != nil {
		for _, k := range s.Data["keys"].([]any) {
			out = append(out, k.(string))
		}
	}
	slices.Sort(out)
	return out
}

func TestTransit(t *testing.T) {
	v := startTestVault(t)
	tr := newTestTransit(t, v)
	ctx := context.Background()

	key, wrapped, err := tr.DataKey(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != 32 || !bytes.HasPrefix(wrapped, []byte("vault:v1:")) || bytes.Contains(wrapped, key) {
		t.Fatalf("DataKey = %d-byte key, wrapped %q", len(key), wrapped)
	}
	if got := transitKeys(t, v); !slices.Equal(got, []string{"airlock-snapshot-acme"}) {
		t.Fatalf("transit keys after acme's first data key = %v, want [airlock-snapshot-acme]", got)
	}
	// A second data key under the same key is another key.
	key2, _, err := tr.DataKey(ctx, "acme")
	if err != nil || bytes.Equal(key, key2) {
		t.Fatalf("second DataKey: same key again, or %v", err)
	}

	t.Run("unwraps for its tenant", func(t *testing.T) {
		got, err := tr.Unwrap(ctx, "acme", wrapped)
		if err != nil || !bytes.Equal(got, key) {
			t.Fatalf("Unwrap = %v", err)
		}
	})
	t.Run("not for another tenant", func(t *testing.T) {
		if _, _, err := tr.DataKey(ctx, "globex"); err != nil {
			t.Fatal(err)
		}
		_, err := tr.Unwrap(ctx, "globex", wrapped)
		if err == nil || errors.Is(err, snapshot.ErrKeysDown) || !strings.Contains(err.Error(), "airlock-snapshot-globex") {
			t.Fatalf("acme's key unwrapped as globex: %v; want Vault's refusal naming globex's key", err)
		}
		assertNoKeyMaterial(t, err, key, wrapped)
	})
	t.Run("not for a tenant with no key", func(t *testing.T) {
		_, err := tr.Unwrap(ctx, "initech", wrapped)
		if err == nil || errors.Is(err, snapshot.ErrKeysDown) {
			t.Fatalf("unwrapped for a tenant with no key: %v", err)
		}
		if slices.Contains(transitKeys(t, v), "airlock-snapshot-initech") {
			t.Fatal("Unwrap made a key")
		}
	})
	t.Run("not once tampered", func(t *testing.T) {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(string(wrapped), "vault:v1:"))
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{0, len(raw) / 2, len(raw) - 1} {
			bad := bytes.Clone(raw)
			bad[i] ^= 1
			tampered := []byte("vault:v1:" + base64.StdEncoding.EncodeToString(bad))
			if _, err := tr.Unwrap(ctx, "acme", tampered); err == nil || errors.Is(err, snapshot.ErrKeysDown) {
				t.Fatalf("byte %d altered: %v; want a refusal", i, err)
			}
		}
		for _, bad := range [][]byte{nil, []byte("garbage"), []byte("vault:v1:\x00\n"), bytes.Repeat([]byte("A"), 1025)} {
			if _, err := tr.Unwrap(ctx, "acme", bad); err == nil {
				t.Fatalf("Unwrap(%.20q) succeeded", bad)
			}
		}
	})
	t.Run("a tenant name cannot name another key", func(t *testing.T) {
		for _, tenant := range []string{"../acme", "x/../acme", "acme/", "/acme", "acme/..", "..", ".", "acme.", "ACME", "acme ", "_61636d65"} {
			name, err := tr.KeyName(tenant)
			if err != nil {
				t.Fatal(err)
			}
			if name == "airlock-snapshot-acme" || strings.ContainsAny(strings.TrimPrefix(name, "airlock-snapshot-"), "/.") {
				t.Fatalf("KeyName(%q) = %q", tenant, name)
			}
			if _, err := tr.Unwrap(ctx, tenant, wrapped); err == nil {
				t.Fatalf("acme's key unwrapped as tenant %q", tenant)
			}
			if _, _, err := tr.DataKey(ctx, tenant); err != nil {
				t.Fatalf("DataKey(%q): %v", tenant, err)
			}
		}
		for _, k := range transitKeys(t, v) {
			if !strings.HasPrefix(k, "airlock-snapshot-") || strings.ContainsAny(k, "/.") {
				t.Fatalf("a key outside the prefix was made: %q", k)
			}
		}
		// acme's key is untouched: its data key still unwraps.
		if got, err := tr.Unwrap(ctx, "acme", wrapped); err != nil || !bytes.Equal(got, key) {
			t.Fatalf("acme's key after the others: %v", err)
		}
	})
	t.Run("Vault down", func(t *testing.T) {
		v2 := startTestVault(t)
		c, _ := v2.Client()
		c.SetMaxRetries(0) // a client's retries are its owner's choice; here they only slow the test
		tr2, err := snapshot.NewTransit(snapshot.TransitConfig{Client: c})
		if err != nil {
			t.Fatal(err)
		}
		k, w, err := tr2.DataKey(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		v2.Stop()
		_, err = tr2.Unwrap(ctx, "acme", w)
		if !errors.Is(err, snapshot.ErrKeysDown) || !strings.Contains(err.Error(), "airlock-snapshot-acme") {
			t.Fatalf("Unwrap with Vault down = %v; want snapshot.ErrKeysDown naming the key", err)
		}
		assertNoKeyMaterial(t, err, k, w)
		if _, _, err := tr2.DataKey(ctx, "acme"); !errors.Is(err, snapshot.ErrKeysDown) {
			t.Fatalf("DataKey with Vault down = %v; want snapshot.ErrKeysDown", err)
		}
	})
}

func TestTransitConfig(t *testing.T) {
	v := startTestVault(t)
	c, _ := v.Client()
	for _, tc := range []struct {
		name string
		cfg  snapshot.TransitConfig
		want string // in the error; "" for none
	}{
		{"defaults", snapshot.TransitConfig{Client: c}, ""},
		{"nested mount", snapshot.TransitConfig{Client: c, Mount: "/airlock/transit/"}, ""},
		{"no client", snapshot.TransitConfig{}, "no Vault client"},
		{"mount climbing out", snapshot.TransitConfig{Client: c, Mount: "transit/../sys"}, "snapshots.transit_mount"},
		{"mount with a space", snapshot.TransitConfig{Client: c, Mount: "tran sit"}, "snapshots.transit_mount"},
		{"prefix with a slash", snapshot.TransitConfig{Client: c, KeyPrefix: "a/b-"}, "key prefix"},
		{"prefix with a dot", snapshot.TransitConfig{Client: c, KeyPrefix: "a.b-"}, "key prefix"},
		{"prefix beginning with a hyphen", snapshot.TransitConfig{Client: c, KeyPrefix: "-a"}, "key prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := snapshot.NewTransit(tc.cfg)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("NewTransit = %v; want %q", err, tc.want)
			}
		})
	}
	// A mount with no transit engine: Vault's answer is given, and it is no outage.
	tr, err := snapshot.NewTransit(snapshot.TransitConfig{Client: c, Mount: "nothing-here"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = tr.DataKey(context.Background(), "acme")
	if err == nil || errors.Is(err, snapshot.ErrKeysDown) || !strings.Contains(err.Error(), "Vault answered") || !strings.Contains(err.Error(), "nothing-here") {
		t.Fatalf("DataKey on a mount with no engine = %v", err)
	}
}

// assertNoKeyMaterial fails t if err's message holds key or wrapped, in any form.
func assertNoKeyMaterial(t *testing.T, err error, key, wrapped []byte) {
	t.Helper()
	msg := err.Error()
	for _, form := range []string{string(key), base64.StdEncoding.EncodeToString(key), string(wrapped), strings.TrimPrefix(string(wrapped), "vault:v1:")} {
		if strings.Contains(msg, form) {
			t.Fatalf("the error shows key material: %s", msg)
		}
	}
}
