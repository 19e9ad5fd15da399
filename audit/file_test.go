package audit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFileSinkChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := OpenFile(FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"a.example", "b.example"} {
		if err := s.Write(context.Background(), Record{Kind: KindHTTP, Host: h, Decision: Allow, Rule: "scope"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopening continues the chain.
	s, err = OpenFile(FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(context.Background(), Record{Kind: KindDNS, QName: "c.example.", Decision: Deny}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	if err := Read(path, func(r Record) error { seqs = append(seqs, r.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 3 || seqs[2] != 3 {
		t.Fatalf("seqs = %v", seqs)
	}

	// Tampering with a line is detected.
	b, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(b), `"decision":"deny"`, `"decision":"allow"`, 1)), 0o600)
	err = Read(path, func(Record) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("tampered trail read as %v", err)
	}
	// Deleting a line is detected.
	lines := strings.SplitAfter(string(b), "\n")
	os.WriteFile(path, []byte(lines[0]+lines[2]), 0o600)
	if err := Read(path, func(Record) error { return nil }); err == nil || !strings.Contains(err.Error(), "chain broken") {
		t.Fatalf("trail with a deleted line read as %v", err)
	}
}

func TestFileSinkFailsClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := OpenFile(FileConfig{Path: path, Queue: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.Write(context.Background(), Record{}); err == nil {
		t.Fatal("closed sink accepted a record")
	}
}

func TestFlushMakesRecordsReadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := OpenFile(FileConfig{Path: path, FlushEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 5 {
		s.Write(context.Background(), Record{Kind: KindLease, Event: "bind"})
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := Read(path, func(Record) error { n++; return nil }); err != nil || n != 5 {
		t.Fatalf("read %d records after Flush: %v", n, err)
	}
}

// TestFileSinkConcurrentWriters: records from many goroutines all land, each once, in one
// unbroken chain, while Flush calls interleave with the writes.
func TestFileSinkConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := OpenFile(FileConfig{Path: path, Queue: 1 << 16})
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
				if err := s.Write(context.Background(), Record{Kind: KindDNS, QName: fmt.Sprintf("w%d-%d.example.", w, i)}); err != nil {
					t.Error(err)
					return
				}
				if i%500 == 0 {
					if err := s.Flush(context.Background()); err != nil {
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
	var seq uint64
	if err := Read(path, func(r Record) error {
		if seq++; r.Seq != seq {
			return fmt.Errorf("seq %d after %d", r.Seq, seq-1)
		}
		if seen[r.QName] {
			return fmt.Errorf("%s written twice", r.QName)
		}
		seen[r.QName] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != writers*each {
		t.Fatalf("%d records in the trail, want %d", len(seen), writers*each)
	}
}
