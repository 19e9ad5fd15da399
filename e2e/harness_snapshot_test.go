package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/snapshot"
)

// This file is the node's snapshot store as someone with the node's disk and Vault would read
// and write it (a catalog of its own over the same directory and transit keys), the second
// tenant of the shared node, and the API calls of the state that travels the CLI does not make.

// otherTenant is the shared node's second tenant, whose API key is otherTenantKey.
const (
	otherTenant    = "globex"
	otherTenantKey = "e2e-globex-key-0123456789abcdef"
)

// otherClient is the Go client of the node's API with the second tenant's key.
func (n *nodeProc) otherClient() *client.Client {
	return &client.Client{Addr: n.client.Addr, Token: otherTenantKey}
}

// snapshotDir is the node's directory store (snapshots.store: dir, its default place).
func (n *nodeProc) snapshotDir() string { return filepath.Join(n.state, "snapshots") }

// catalog is a snapshot catalog over the node's own store, with the tenants' keys in the node's
// dev Vault: it opens what the node saved, and saves what the node will open, without the
// pool's checks. Its staging directory is the test's own (a catalog clears its staging
// directory when it starts).
func (n *nodeProc) catalog(t *testing.T) *snapshot.Catalog {
	t.Helper()
	store, err := snapshot.NewDir(n.snapshotDir())
	if err != nil {
		t.Fatal(err)
	}
	keys, err := snapshot.NewTransit(snapshot.TransitConfig{Client: n.vaultClient(t), Mount: snapshot.DefaultTransitMount})
	if err != nil {
		t.Fatal(err)
	}
	c, err := snapshot.NewCatalog(snapshot.CatalogConfig{Store: store, Keys: keys, Staging: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openArchive decrypts tenant's snapshot ref from the node's store with c and returns the
// archive, which must verify against its ID.
func openArchive(t *testing.T, c *snapshot.Catalog, tenant, ref string) (snapshot.Manifest, []byte) {
	t.Helper()
	m, body, err := c.Open(context.Background(), tenant, ref)
	if err != nil {
		t.Fatalf("opening %s of tenant %s: %v", ref, tenant, err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("reading %s of tenant %s: %v", ref, tenant, err)
	}
	return m, b
}

// tarEntries lists an archive's entries as "NAME TYPE", in order.
func tarEntries(t *testing.T, archive []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("the archive does not read as tar: %v", err)
		}
		out = append(out, fmt.Sprintf("%s %c", h.Name, h.Typeflag))
	}
}

// craftedEntry is one entry of an archive a test writes by hand: its header, and for a regular
// file its content (which may be shorter than the header says, to declare a size without
// storing it).
type craftedEntry struct {
	hdr  tar.Header
	body string
}

// craftTar writes entries as a tar archive, as no sandbox's tar would: nothing is checked.
func craftTar(t *testing.T, entries []craftedEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(1_000_000_000, 0)
		}
		if h.Format == tar.FormatUnknown {
			h.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("crafting %q: %v", h.Name, err)
		}
		if e.body != "" {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatalf("crafting %q: %v", h.Name, err)
			}
		}
	}
	// A short body is the point of some entries: the archive ends where they do, unclosed.
	if err := tw.Close(); err != nil && !errors.Is(err, tar.ErrWriteTooLong) && !strings.Contains(err.Error(), "missed writing") {
		t.Fatalf("crafting: %v", err)
	}
	return buf.Bytes()
}

// apiError asserts that err is the API's refusal with status and code, and returns it.
func apiError(t *testing.T, err error, status int, code string) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) || e.Status != status || e.Code != code {
		t.Fatalf("got %v, want the API's %d %s", err, status, code)
	}
	return e
}

// resumeAllow resumes a paused lease with an allow list, which the node (it mints tokens)
// makes into a task token for the paused lease's own task.
func (n *nodeProc) resumeAllow(t *testing.T, lease string, allow ...string) (apitype.LeaseView, int, string) {
	t.Helper()
	body, _ := json.Marshal(apitype.ResumeRequest{Allow: allow})
	req, err := http.NewRequest(http.MethodPost, n.client.Addr+"/v1/leases/"+lease+"/resume", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+n.client.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("resume %s: %v", lease, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v apitype.LeaseView
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("resume %s answered %s: %v", lease, b, err)
		}
	}
	return v, resp.StatusCode, string(b)
}

// sandboxGone reports whether the engine no longer knows the container id.
func sandboxGone(id string) bool {
	out, err := docker("inspect", "--format", "{{.Id}}", id)
	return err != nil && strings.Contains(strings.ToLower(out), "no such")
}

// awaitEnd waits for the end of lease id, released: a release answers before its sandbox is
// destroyed, and the lease's receipt waits for that.
func (n *nodeProc) awaitEnd(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := n.goClient().Receipt(ctx, id); err != nil {
		t.Fatalf("waiting for the end of lease %s (its receipt): %v", id, err)
	}
}

// destroyedAfter waits, up to 30 s, until the engine has destroyed a container of template
// since since (the end of a lease, refused or released, destroys its sandbox after it
// answers), and lists what it had destroyed by then.
func (n *nodeProc) destroyedAfter(t *testing.T, template string, since time.Time) []string {
	t.Helper()
	var gone []string
	wait.For(t, 30*time.Second, "the engine to destroy the sandbox the lease claimed", func() bool {
		gone = n.destroyedSince(t, template, since)
		return len(gone) > 0
	})
	return gone
}

// destroyedSince lists the node's containers of template the engine destroyed from since until
// now.
func (n *nodeProc) destroyedSince(t *testing.T, template string, since time.Time) []string {
	t.Helper()
	stamp := func(at time.Time) string { return fmt.Sprintf("%d.%09d", at.Unix(), at.Nanosecond()) }
	out, err := docker("events", "--since", stamp(since), "--until", stamp(time.Now()), "--filter", "type=container",
		"--filter", "event=destroy", "--filter", "label=dev.airlock.node="+n.spec.Name,
		"--filter", "label=dev.airlock.template="+template, "--format", "{{.Actor.ID}}")
	if err != nil {
		t.Fatalf("docker events: %v: %s", err, out)
	}
	return strings.Fields(out)
}
