package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
)

// TestFilesInAndOut: files, and directories as tar archives, are copied into and out of a
// sandbox's workspace and never outside it, and each copy is recorded under the lease.
func TestFilesInAndOut(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
		t.Run("files and directories in and out, never outside the workspace", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			src := t.TempDir() + "/in.bin"
			data := make([]byte, 3<<20)
			rand.Read(data)
			os.WriteFile(src, data, 0o600)
			if _, errs, code := n.cli(t, "cp", src, a.ID+":/workspace/sub/in.bin"); code != 0 {
				t.Fatalf("upload: %s", errs)
			}
			sum := sha256.Sum256(data)
			out, _, code := n.exec(t, a.ID, "sha256sum", "/workspace/sub/in.bin")
			if code != 0 || !strings.HasPrefix(out, hex.EncodeToString(sum[:])) {
				t.Fatalf("uploaded file differs: %s", out)
			}
			dst := t.TempDir() + "/out.bin"
			if _, errs, code := n.cli(t, "cp", a.ID+":sub/in.bin", dst); code != 0 {
				t.Fatalf("download: %s", errs)
			}
			if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
				t.Fatal("downloaded file differs")
			}
			// A directory as a tar archive, in and out; an archive with a ../ member is refused.
			if _, errs, code := n.cli(t, "cp", "--tar", tarOf(t, map[string]string{"a.txt": "alpha", "sub/b.txt": "beta"}), a.ID+":/workspace/proj"); code != 0 {
				t.Fatalf("tar upload: %s", errs)
			}
			if out, _, _ := n.exec(t, a.ID, "cat", "/workspace/proj/sub/b.txt"); out != "beta" {
				t.Fatalf("unpacked file: %q", out)
			}
			_, errs, code := n.cli(t, "cp", "--tar", tarOf(t, map[string]string{"../escape.txt": "nope"}), a.ID+":/workspace/proj")
			if code == 0 || !strings.Contains(errs, "..") {
				t.Fatalf("an archive with a ../ member: exit %d %s", code, errs)
			}
			if _, _, code := n.exec(t, a.ID, "test", "-e", "/workspace/escape.txt"); code == 0 {
				t.Fatal("a ../ member escaped the target directory")
			}
			tarOut := t.TempDir() + "/out.tar"
			if _, errs, code := n.cli(t, "cp", "--tar", a.ID+":/workspace/proj", tarOut); code != 0 {
				t.Fatalf("tar download: %s", errs)
			}
			f, _ := os.Open(tarOut)
			names := map[string]bool{}
			tr := tar.NewReader(f)
			for {
				h, err := tr.Next()
				if err != nil {
					break
				}
				names[strings.TrimPrefix(h.Name, "./")] = true
			}
			f.Close()
			if !names["a.txt"] || !names["sub/b.txt"] {
				t.Fatalf("downloaded archive holds %v", names)
			}
			for _, bad := range []string{a.ID + ":/etc/passwd", a.ID + ":../../etc/passwd", a.ID + ":/workspace/../etc/shadow"} {
				if _, errs, code := n.cli(t, "cp", bad, t.TempDir()+"/x"); code == 0 || !strings.Contains(errs, "outside the workspace") {
					t.Errorf("download of %s: exit %d %s", bad, code, errs)
				}
			}
			refused := func(recs []audit.Record) bool {
				for _, r := range recs {
					if r.Kind == audit.KindFile && r.Decision == audit.Deny && r.Rule == rule.BadRequest && strings.Contains(r.Reason, "outside the workspace") {
						return true
					}
				}
				return false
			}
			if !refused(n.trailUntil(t, a.ID, refused)) {
				t.Error("no deny record, under rule bad-request, of a download outside the workspace")
			}
			want := []string{"file/upload", "file/download", "file/upload-tar", "file/download-tar"}
			kinds := n.logKinds(t, a.ID, want...)
			for _, k := range want {
				if !kinds[k] {
					t.Errorf("logs --lease lacks a %s record (have %v)", k, kinds)
				}
			}
		})
	})
}
