package snapshot

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// A restore reads a snapshot through Filter, whose tar reader stops at the archive's end
// marker: Filter must still read what follows to its end, so that Open's reader checks the
// archive against the snapshot's ID (and the blob's last chunk) there. One snapshot's blob
// put under another's key by someone with the store's write access, which authenticates chunk
// by chunk since it is the tenant's own, must not restore as the other.
func TestFilterVerifiesTheSnapshot(t *testing.T) {
	tc := newTestCatalog(t, nil, Retention{})
	old := tarArchive(t, dirEntry("workspace/"), regEntry("workspace/notes", "what the snapshot holds"))
	other := tarArchive(t, dirEntry("workspace/"), regEntry("workspace/notes", "what another snapshot holds"))
	ma, mb := tc.save(t, "acme", "a", old), tc.save(t, "acme", "b", other)
	tc.store.set("tenants/acme/blobs/"+strings.TrimPrefix(ma.ID, "sha256:"), tc.store.bytes("tenants/acme/blobs/"+strings.TrimPrefix(mb.ID, "sha256:")))

	_, body, err := tc.Open(context.Background(), "acme", ma.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	_, err = Filter(body, io.Discard, filterRules())
	var ref *Refused
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "does not verify") || errors.As(err, &ref) {
		t.Fatalf("Filter of a snapshot whose blob is another's = %v; want ErrCorrupt (does not verify), not a refusal", err)
	}
}

// What follows an archive's end marker: GNU tar's padding (zeros, to the end of its 10 KiB
// record) passes; anything else is refused, and a stream of zeros without end is not read
// through.
func TestFilterReadsPastTheEnd(t *testing.T) {
	data := tarArchive(t, dirEntry("workspace/"), regEntry("workspace/f", "x"))
	padded := append(bytes.Clone(data), make([]byte, 10240-len(data)%10240)...)
	if _, err := Filter(bytes.NewReader(padded), io.Discard, filterRules()); err != nil {
		t.Fatalf("an archive padded as GNU tar pads it: %v", err)
	}
	for _, tt := range []struct {
		name string
		r    io.Reader
	}{
		{"bytes past the end", bytes.NewReader(append(bytes.Clone(data), "more"...))},
		{"zeros without end", io.MultiReader(bytes.NewReader(data), zeros{})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Filter(tt.r, io.Discard, filterRules())
			var ref *Refused
			if !errors.As(err, &ref) || ref.Check != FormatCheck || !strings.Contains(err.Error(), "past the end") {
				t.Fatalf("Filter = %v; want a format refusal naming what is past the end", err)
			}
		})
	}
}

// zeros reads as zero bytes without end.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
