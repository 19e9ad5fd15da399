package audit

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"

	"golang.org/x/mod/sumdb/note"
)

// testKey returns a checkpoint signer and its verifier for node.
func testKey(t testing.TB, node string) (note.Signer, note.Verifier) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, KeyName(node))
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

// readAll returns every record of the trail in dir that verifies on its own.
func readAll(t *testing.T, dir string) []Record {
	t.Helper()
	var out []Record
	if err := ReadDir(dir, func(r Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// userRecords leaves out the trail's own records.
func userRecords(rs []Record) []Record {
	var out []Record
	for _, r := range rs {
		if r.Kind != KindAudit {
			out = append(out, r)
		}
	}
	return out
}

func TestFileSinkChainAcrossRuns(t *testing.T) {
	dir := t.TempDir()
	signer, verifier := testKey(t, "n1")
	for run := range 3 {
		s, err := OpenFile(FileConfig{Dir: dir, Node: "n1", Signer: signer})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := s.Write(context.Background(), Record{Kind: KindHTTP, Host: fmt.Sprintf("h%d-%d.example", run, i), Decision: Allow}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	all := readAll(t, dir)
	if got := len(userRecords(all)); got != 9 {
		t.Fatalf("%d records after three runs, want 9", got)
	}
	for i, r := range all {
		if r.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d", i, r.Seq)
		}
	}
	// Each run opened a segment of its own and signed its records at Close.
	if segs, _ := listSegments(dir); len(segs) != 3 {
		t.Fatalf("segments %v, want one per run", segs)
	}
	rep, err := Verify(dir, VerifyOptions{Verifier: verifier})
	if err != nil || !rep.OK() || rep.Checkpoints != 3 || rep.CheckpointsValid != 3 || rep.Covered != rep.To {
		t.Fatalf("verify: %v\n%s", err, rep)
	}
}

func TestFileSinkFailsClosed(t *testing.T) {
	s, err := OpenFile(FileConfig{Dir: t.TempDir(), Queue: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.Write(context.Background(), Record{}); err == nil {
		t.Fatal("closed sink accepted a record")
	}
}

func TestFlushMakesRecordsQueryable(t *testing.T) {
	s, err := OpenFile(FileConfig{Dir: t.TempDir(), FlushEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 5 {
		s.Write(context.Background(), Record{Kind: KindLease, Event: "bind", Lease: "l1"})
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := 0
	if _, err := s.Query(context.Background(), Query{Lease: "l1"}, func(Record) error { n++; return nil }); err != nil || n != 5 {
		t.Fatalf("queried %d records after Flush: %v", n, err)
	}
}

// TestFileSinkConcurrentWriters: records from many goroutines all land, each once, in one
// unbroken chain across rotations, while Flush calls and queries interleave with the writes.
func TestFileSinkConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFile(FileConfig{Dir: dir, Queue: 1 << 16, SegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 2000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := s.Write(context.Background(), Record{Kind: KindDNS, Lease: fmt.Sprint("w", w), QName: fmt.Sprintf("w%d-%d.example.", w, i)}); err != nil {
					t.Error(err)
					return
				}
				if i%500 == 0 {
					if err := s.Flush(context.Background()); err != nil {
						t.Error(err)
					}
					last := ""
					if _, err := s.Query(context.Background(), Query{Lease: fmt.Sprint("w", w)}, func(r Record) error {
						if r.QName <= last && len(r.QName) == len(last) {
							return fmt.Errorf("query out of order: %s after %s", r.QName, last)
						}
						last = r.QName
						return nil
					}); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range userRecords(readAll(t, dir)) {
		if seen[r.QName] {
			t.Fatalf("%s written twice", r.QName)
		}
		seen[r.QName] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("%d records in the trail, want %d", len(seen), writers*each)
	}
	if segs, _ := listSegments(dir); len(segs) < 10 {
		t.Fatalf("only %d segments for %d records of 64 KiB segments", len(segs), writers*each)
	}
	if rep, err := Verify(dir, VerifyOptions{}); err != nil || !rep.OK() {
		t.Fatalf("verify: %v\n%s", err, rep)
	}
}

// Segments rotate by size and by age; every sealed one has its index, and each begins with its
// own opening record saying why.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFile(FileConfig{Dir: dir, Node: "n", SegmentBytes: 4 << 10, SegmentAge: 200 * time.Millisecond, FlushEvery: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		s.Write(context.Background(), Record{Kind: KindHTTP, Host: "a.example", Path: fmt.Sprint("/", i)})
	}
	s.Flush(context.Background())
	bySize, _ := listSegments(dir)
	if len(bySize) < 3 {
		t.Fatalf("100 records in 4 KiB segments made %d segments", len(bySize))
	}
	s.Write(context.Background(), Record{Kind: KindHTTP, Host: "b.example"})
	wait.For(t, 10*time.Second, "a segment to be sealed by age (200ms)", func() bool {
		segs, _ := listSegments(dir)
		return len(segs) > len(bySize)
	})
	s.Close()
	segs, _ := listSegments(dir)
	for _, name := range segs[:len(segs)-1] {
		if _, err := os.Stat(indexPath(filepath.Join(dir, name))); err != nil {
			t.Errorf("sealed segment %s has no index: %v", name, err)
		}
	}
	var reasons []string
	for _, r := range readAll(t, dir) {
		if r.Event == EventSegment {
			reasons = append(reasons, r.Reason)
		}
	}
	all := strings.Join(reasons, "\n")
	if !strings.Contains(all, "reached audit.segment_bytes") || !strings.Contains(all, "open for audit.segment_age") ||
		!strings.HasPrefix(all, "the node started") {
		t.Fatalf("opening records do not say why segments began:\n%s", all)
	}
}

// Retention deletes the oldest segments by total size, never the one being written, and leaves
// a signed record saying what went and why, which Verify accepts as the explanation of the gap.
func TestRetentionBySize(t *testing.T) {
	dir := t.TempDir()
	signer, verifier := testKey(t, "n")
	s, err := OpenFile(FileConfig{Dir: dir, Node: "n", Signer: signer, SegmentBytes: 4 << 10, KeepBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		s.Write(context.Background(), Record{Kind: KindHTTP, Host: "a.example", Path: fmt.Sprint("/", i)})
	}
	s.Close()
	var total int64
	segs, _ := listSegments(dir)
	for _, name := range segs {
		st, _ := os.Stat(filepath.Join(dir, name))
		total += st.Size()
	}
	if total > 16<<10+8<<10 {
		t.Fatalf("trail is %d bytes with keep_bytes 16 KiB", total)
	}
	all := readAll(t, dir)
	if all[0].Seq == 1 {
		t.Fatal("nothing was deleted")
	}
	rep, err := Verify(dir, VerifyOptions{Verifier: verifier})
	if err != nil || !rep.OK() || len(rep.Deleted) == 0 || !strings.Contains(rep.Deleted[0], "audit.keep_bytes") {
		t.Fatalf("verify after retention: %v\n%s", err, rep)
	}
	// The same gap made by hand is reported.
	os.Remove(filepath.Join(dir, segs[0]))
	rep, _ = Verify(dir, VerifyOptions{Verifier: verifier})
	if rep.OK() || !strings.Contains(rep.String(), "no retention record explains it") {
		t.Fatalf("a segment deleted by hand after retention:\n%s", rep)
	}
}

func TestRetentionByAge(t *testing.T) {
	dir := t.TempDir()
	// A segment written two days ago.
	s, err := OpenFile(FileConfig{Dir: dir, Node: "n", clock: func() time.Time { return time.Now().Add(-48 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	s.Write(context.Background(), Record{Kind: KindHTTP, Host: "old.example"})
	s.Close()
	s, err = OpenFile(FileConfig{Dir: dir, Node: "n", KeepFor: 24 * time.Hour, SegmentBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		s.Write(context.Background(), Record{Kind: KindHTTP, Host: "new.example"})
	}
	s.Close()
	for _, r := range readAll(t, dir) {
		if r.Host == "old.example" {
			t.Fatal("a record older than keep_for was kept")
		}
	}
	rep, _ := Verify(dir, VerifyOptions{})
	if !rep.OK() || len(rep.Deleted) == 0 || !strings.Contains(rep.Deleted[0], "audit.keep_for") {
		t.Fatalf("verify after retention by age:\n%s", rep)
	}
}

// The latest checkpoint reaches OnCheckpoint, and one is signed on request.
func TestCheckpointOnRequestAndPublished(t *testing.T) {
	signer, verifier := testKey(t, "n")
	got := make(chan Checkpoint, 16)
	s, err := OpenFile(FileConfig{Dir: t.TempDir(), Node: "n", Signer: signer, CheckpointEvery: time.Hour,
		OnCheckpoint: func(c Checkpoint) { got <- c }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Write(context.Background(), Record{Kind: KindLease, Event: "release", Lease: "l"})
	c, err := s.Checkpoint(context.Background())
	if err != nil || c.Seq != 2 {
		t.Fatalf("checkpoint %+v: %v", c, err)
	}
	if _, err := OpenCheckpoint(c.Note, verifier); err != nil {
		t.Fatalf("checkpoint does not verify: %v", err)
	}
	select {
	case p := <-got:
		if p.Seq != c.Seq {
			t.Fatalf("published checkpoint %d, signed %d", p.Seq, c.Seq)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waited 10s for the checkpoint to be published")
	}
	_, other := testKey(t, "n")
	if _, err := OpenCheckpoint(c.Note, other); err == nil || !strings.Contains(err.Error(), "not signed by") {
		t.Fatalf("a checkpoint opened with another key: %v", err)
	}
}

// Denials and flags are counted per live lease, and a lease's series ends with it.
func TestLeaseCounts(t *testing.T) {
	s, err := OpenFile(FileConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for range 3 {
		s.Write(ctx, Record{Kind: KindHTTP, Tenant: "acme", Lease: "l1", Decision: Deny})
	}
	s.Write(ctx, Record{Kind: KindDNS, Tenant: "acme", Lease: "l1", Decision: Deny, Flagged: true})
	s.Write(ctx, Record{Kind: KindHTTP, Tenant: "acme", Lease: "l2", Decision: Allow})
	s.Write(ctx, Record{Kind: KindHTTP, Tenant: "acme", Lease: "l3", Decision: Deny})
	s.Write(ctx, Record{Kind: KindLease, Tenant: "acme", Lease: "l3", Event: "release"})
	s.Flush(ctx)
	s.m.leases.mu.Lock()
	defer s.m.leases.mu.Unlock()
	if v := s.m.leases.m[leaseKey{"acme", "l1"}]; v == nil || v[0] != 4 || v[1] != 1 || len(s.m.leases.m) != 1 {
		t.Fatalf("counts %v", s.m.leases.m)
	}
}

// The checkpoint key is made once and kept; its public half is derived again when it is lost; a
// key made for another node is refused.
func TestLoadSigner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit-key")
	s1, pub1, err := LoadSigner(path, "n1")
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path + ".pub")
	s2, pub2, err := LoadSigner(path, "n1")
	if err != nil || pub2 != pub1 || s2.KeyHash() != s1.KeyHash() {
		t.Fatalf("reloading: %v, %q vs %q", err, pub2, pub1)
	}
	v, err := NewVerifier(pub2)
	if err != nil || v.KeyHash() != s1.KeyHash() {
		t.Fatalf("the derived public key: %v", err)
	}
	if _, _, err := LoadSigner(path, "n2"); err == nil || !strings.Contains(err.Error(), "give each node its own key") {
		t.Fatalf("another node's key: %v", err)
	}
}
