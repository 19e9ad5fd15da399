package pool_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// fakeWorkspace is a sandbox whose workspace is a map: uploads (a file, or a tar archive) write
// it, "put PATH TEXT" and "rm PATH" commands change it, "print TEXT" writes TEXT to stdout, and
// the node's tar of the workspace reads it.
type fakeWorkspace struct {
	mu    sync.Mutex
	files map[string]string
	links map[string]string // path -> target ("ln TARGET PATH")
}

func (f *fakeWorkspace) exec(_ context.Context, _ pool.Sandbox, req pool.ExecRequest, stdin io.Reader, stdout, _ io.Writer) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := req.Cmd
	switch {
	case c[0] == "sh" && strings.Contains(c[2], "tar -x"):
		tr := tar.NewReader(stdin)
		for h, err := tr.Next(); err == nil; h, err = tr.Next() {
			b, _ := io.ReadAll(tr)
			f.files[path.Join(c[4], h.Name)] = string(b)
		}
	case c[0] == "sh" && strings.Contains(c[2], "cat >"):
		b, _ := io.ReadAll(stdin)
		f.files[c[4]] = string(b)
	case c[0] == "sh" && strings.Contains(c[2], "tar -c"):
		tw := tar.NewWriter(stdout)
		for p, v := range f.files {
			tw.WriteHeader(&tar.Header{Name: "./" + strings.TrimPrefix(p, "/workspace/"), Mode: 0o600, Size: int64(len(v)), Typeflag: tar.TypeReg})
			io.WriteString(tw, v)
		}
		for p, to := range f.links {
			tw.WriteHeader(&tar.Header{Name: "./" + strings.TrimPrefix(p, "/workspace/"), Linkname: to, Mode: 0o777, Typeflag: tar.TypeSymlink})
		}
		tw.Close()
	case c[0] == "put":
		f.files[c[1]] = c[2]
	case c[0] == "ln":
		f.links[c[2]] = c[1]
	case c[0] == "rm":
		delete(f.files, c[1])
	case c[0] == "print":
		io.Copy(io.Discard, stdin)
		io.WriteString(stdout, c[1])
	}
	return 0, nil
}

func tarOf(files map[string]string) *bytes.Buffer {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for n, v := range files {
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o600, Size: int64(len(v)), Typeflag: tar.TypeReg})
		io.WriteString(tw, v)
	}
	tw.Close()
	return &b
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestLedger: an exec record carries each stream's size, hash and head (through the lease's
// redaction, which sees the secret whole even where the head cuts it); at release the workspace
// changes relative to what the tenant put there are recorded file by file, with a summary.
func TestLedger(t *testing.T) {
	ws := &fakeWorkspace{files: map[string]string{}, links: map[string]string{}}
	sink := &recordSink{}
	secret := "tok-0123456789abcdef"
	e := pooltest.NewEnv(t, pooltest.EnvConfig{
		Runtime: func(rt *pooltest.Runtime) { rt.ExecFunc = ws.exec },
		Pool: func(c *pool.Config) {
			c.Audit, c.OutputHead = sink, 16
			c.Redact = func(lease, text string) string { return strings.ReplaceAll(text, secret, "[redacted]") }
		}})
	e.MustWarm(t, 1)
	tok, _ := e.Issuer.Mint("task-ledger", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	ctx := context.Background()
	l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Manager.PutFile(ctx, "acme", l.ID, "kept.txt", strings.NewReader("same"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Manager.PutFile(ctx, "acme", l.ID, "src", tarOf(map[string]string{"a.py": "v1", "gone.py": "x"}), true); err != nil {
		t.Fatal(err)
	}
	run := func(cmd ...string) {
		if _, err := e.Manager.Exec(ctx, "acme", l.ID, pool.ExecRequest{Cmd: cmd}, strings.NewReader("input"), io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	run("put", "/workspace/src/a.py", "v2")
	run("rm", "/workspace/src/gone.py")
	run("put", "/workspace/out/new.bin", "made")
	run("ln", "/etc/shadow", "/workspace/out/peek")
	run("print", "0123456789"+secret+" and more")
	if err := e.Manager.Release(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.Manager.AwaitEnd(ctx, "acme", l.ID); err != nil {
		t.Fatal(err)
	}

	var printed audit.Record
	for _, r := range sink.kind(audit.KindExec) {
		if r.Command[0] == "print" {
			printed = r
		}
	}
	out := "0123456789" + secret + " and more"
	if printed.Stdout == nil || printed.Stdout.Size != int64(len(out)) || printed.Stdout.SHA256 != sha(out) ||
		printed.Stdout.Head != "0123456789[redac" || printed.Stdin == nil || printed.Stdin.SHA256 != sha("input") || printed.Stdin.Head != "" {
		t.Fatalf("the exec record's streams: stdin %+v stdout %+v", printed.Stdin, printed.Stdout)
	}
	changes := map[string]audit.Record{}
	var summary audit.Record
	for _, r := range sink.files() {
		switch r.Event {
		case pool.EventCreated, pool.EventModified, pool.EventDeleted:
			changes[r.Path] = r
		case pool.EventWorkspace:
			summary = r
		}
	}
	want := map[string]audit.Event{"/workspace/src/a.py": pool.EventModified, "/workspace/src/gone.py": pool.EventDeleted, "/workspace/out/new.bin": pool.EventCreated,
		"/workspace/out/peek": pool.EventCreated}
	if len(changes) != len(want) {
		t.Fatalf("workspace changes %+v, want %v", changes, want)
	}
	for p, ev := range want {
		if changes[p].Event != ev {
			t.Errorf("%s: %q, want %q", p, changes[p].Event, ev)
		}
	}
	if c := changes["/workspace/out/new.bin"]; c.Size != 4 || c.SHA256 != sha("made") || c.Lease != l.ID {
		t.Errorf("the created file's record: %+v", c)
	}
	if c := changes["/workspace/out/peek"]; c.To != "/etc/shadow" {
		t.Errorf("a link the lease made is recorded as %+v", c)
	}
	if !strings.HasPrefix(summary.Reason, "2 created, 1 modified, 1 deleted; 4 files at the end") {
		t.Errorf("summary: %q", summary.Reason)
	}
	var bind audit.Record
	for _, r := range sink.kind(audit.KindLease) {
		if r.Event == "bind" {
			bind = r
		}
	}
	if bind.Template != "default" || bind.Runtime == "" || len(bind.Scopes) != 1 || !strings.Contains(bind.Scopes[0], "a.example") {
		t.Errorf("the bind record does not say what was granted: %+v", bind)
	}
}
