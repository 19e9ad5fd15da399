package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/pool"
)

// TestWorkspaceFileOperations: the workspace is listed, described, made, moved and removed in,
// and nowhere else, not even through a link that leads out of it; each operation is recorded.
func TestWorkspaceFileOperations(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
		t.Run("the workspace is listed, described, made, moved and removed in, and nowhere else", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			cl := n.goClient()
			ctx := context.Background()
			if _, errs, code := n.exec(t, a.ID, "sh", "-c", "mkdir -p /workspace/src && printf hello > /workspace/src/a.txt && chmod 640 /workspace/src/a.txt && ln -s a.txt /workspace/src/link && printf x > '/workspace/src/odd\nname'"); code != 0 {
				t.Fatalf("setup: %s", errs)
			}
			v, err := cl.ListFiles(ctx, a.ID, "src", 1)
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]pool.Entry{}
			for _, e := range v.Entries {
				byName[e.Name] = e
			}
			if e := byName["a.txt"]; e.Type != "file" || e.Size != 5 || e.Mode != "0640" || e.Path != "/workspace/src/a.txt" || time.Since(e.MTime) > time.Hour {
				t.Errorf("a.txt listed as %+v", e)
			}
			if e := byName["link"]; e.Type != "symlink" || e.Link != "a.txt" {
				t.Errorf("link listed as %+v", e)
			}
			if _, ok := byName["odd\nname"]; !ok || len(v.Entries) != 3 {
				t.Errorf("listing: %+v", v.Entries)
			}
			if out, errs, code := n.cli(t, "fs", "ls", a.ID, "--json"); code != 0 || !strings.Contains(out, `"path":"/workspace/src"`) {
				t.Errorf("airlock fs ls --json of the workspace: exit %d %s %s", code, out, errs)
			}
			if _, errs, code := n.cli(t, "fs", "mkdir", a.ID, "deep/er/still"); code != 0 {
				t.Fatalf("mkdir: %s", errs)
			}
			if e, err := cl.Stat(ctx, a.ID, "deep/er/still"); err != nil || e.Type != "dir" {
				t.Errorf("stat of the new folder: %+v %v", e, err)
			}
			if _, errs, code := n.cli(t, "fs", "mv", a.ID, "src/a.txt", "deep/b.txt"); code != 0 {
				t.Fatalf("mv: %s", errs)
			}
			if out, _, _ := n.exec(t, a.ID, "cat", "/workspace/deep/b.txt"); out != "hello" {
				t.Errorf("after the move: %q", out)
			}
			// Refusals, each with a status an agent can act on.
			for _, c := range []struct {
				name string
				err  error
				code string
			}{
				{"stat of a missing file", func() error { _, err := cl.Stat(ctx, a.ID, "nope"); return err }(), "no_such_file"},
				{"a move onto a file", cl.Move(ctx, a.ID, "src/odd\nname", "deep/b.txt", false), "file_exists"},
				{"a move out of the workspace", cl.Move(ctx, a.ID, "deep/b.txt", "/tmp/b.txt", false), "bad_request"},
				{"a listing outside", func() error { _, err := cl.ListFiles(ctx, a.ID, "/etc", 1); return err }(), "bad_request"},
				{"removing the workspace", cl.Remove(ctx, a.ID, "/workspace", true), "bad_request"},
				{"removing a folder that is not empty", cl.Remove(ctx, a.ID, "deep", false), "bad_request"},
			} {
				var ae *client.Error
				if !errors.As(c.err, &ae) || ae.Code != c.code {
					t.Errorf("%s: %v, want %s", c.name, c.err, c.code)
				}
			}
			if out, _, _ := n.exec(t, a.ID, "cat", "/workspace/deep/b.txt"); out != "hello" {
				t.Errorf("a refused move changed the file: %q", out)
			}
			if _, errs, code := n.cli(t, "fs", "rm", a.ID, "deep", "-r"); code != 0 {
				t.Fatalf("rm -r: %s", errs)
			}
			if _, _, code := n.exec(t, a.ID, "test", "-e", "/workspace/deep"); code == 0 {
				t.Error("the folder is still there after rm -r")
			}
			// rm of a symlink removes the link, not what it names.
			n.exec(t, a.ID, "sh", "-c", "mkdir -p /tmp/keep && echo k > /tmp/keep/f && ln -s /tmp/keep /workspace/tolink")
			if err := cl.Remove(ctx, a.ID, "tolink", true); err != nil {
				t.Fatal(err)
			}
			if out, _, _ := n.exec(t, a.ID, "cat", "/tmp/keep/f"); out != "k\n" {
				t.Errorf("removing a symlink to a folder outside reached through it: %q", out)
			}
			// Links that lead out of the workspace: what goes through them is refused, checked in
			// the sandbox where the links are (the path alone looks inside); the link itself is
			// still an entry of the workspace, to describe or remove.
			if _, errs, code := n.exec(t, a.ID, "sh", "-c", "ln -s /etc /workspace/etclink && ln -s /tmp /workspace/tmplink && echo f > /workspace/f"); code != 0 {
				t.Fatalf("setup: %s", errs)
			}
			var sink bytes.Buffer
			for _, c := range []struct {
				name string
				err  error
			}{
				{"a download through a link", func() error { _, err := cl.GetFile(ctx, a.ID, "etclink/passwd", &sink, false); return err }()},
				{"an archive download through a link", func() error { _, err := cl.GetFile(ctx, a.ID, "etclink", &sink, true); return err }()},
				{"an upload through a link", func() error {
					_, err := cl.PutFile(ctx, a.ID, "tmplink/planted", strings.NewReader("x"), false)
					return err
				}()},
				{"a listing through a link", func() error { _, err := cl.ListFiles(ctx, a.ID, "etclink", 1); return err }()},
				{"a folder made through a link", cl.Mkdir(ctx, a.ID, "tmplink/made")},
				{"a move through a link", cl.Move(ctx, a.ID, "f", "tmplink/moved", false)},
				{"a stat through a link", func() error { _, err := cl.Stat(ctx, a.ID, "etclink/passwd"); return err }()},
				{"a remove through a link", cl.Remove(ctx, a.ID, "etclink/hostname", false)},
				{"an archive unpacked where a link leads out", func() error {
					f, err := os.Open(tarOf(t, map[string]string{"tmplink/unpacked": "x"}))
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					_, err = cl.PutFile(ctx, a.ID, "/workspace", f, true)
					return err
				}()},
			} {
				if c.err == nil || !strings.Contains(c.err.Error(), "through a symbolic link, outside the workspace") {
					t.Errorf("%s: %v", c.name, c.err)
				}
			}
			if out, _, _ := n.exec(t, a.ID, "sh", "-c", "ls /tmp/planted /tmp/made /tmp/moved /tmp/unpacked 2>&1; cat /workspace/f"); strings.Contains(out, "/tmp/planted\n") || strings.Contains(out, "/tmp/unpacked\n") || !strings.HasSuffix(out, "f\n") {
				t.Errorf("something went through a link: %q", out)
			}
			if e, err := cl.Stat(ctx, a.ID, "etclink"); err != nil || e.Type != "symlink" || e.Link != "/etc" {
				t.Errorf("the link itself: %+v %v", e, err)
			}
			if err := cl.Remove(ctx, a.ID, "etclink", false); err != nil {
				t.Errorf("removing the link itself: %v", err)
			}
			want := []string{"file/list", "file/stat", "file/mkdir", "file/move", "file/remove"}
			kinds := n.logKinds(t, a.ID, want...)
			for _, k := range want {
				if !kinds[k] {
					t.Errorf("logs --lease lacks a %s record (have %v)", k, kinds)
				}
			}
		})
	})
}
