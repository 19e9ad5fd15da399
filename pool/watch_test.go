package pool

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The reader finds listings however the output is cut, empty ones and entries with an empty
// link field among them.
func TestWatchReader(t *testing.T) {
	entry := func(typ, p string) string { return typ + "\x003\x00644\x001700000000.5\x00\x00" + p + "\x00" }
	stream := entry("f", "/w/a") + entry("d", "/w/d") + "\x00" + // two entries
		"\x00" + // none
		entry("l", "/w/odd\nname") + "\x00" // one, with a newline in its name
	for _, step := range []int{1, 7, len(stream)} {
		var r WatchReader
		var got [][]string
		for i := 0; i < len(stream); i += step {
			lists, err := r.Feed([]byte(stream[i:min(i+step, len(stream))]))
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			for _, l := range lists {
				var names []string
				for _, e := range l {
					names = append(names, e.Type+":"+e.Path)
				}
				got = append(got, names)
			}
		}
		want := [][]string{{"file:/w/a", "dir:/w/d"}, nil, {"symlink:/w/odd\nname"}}
		if !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("step %d: %q, want %q", step, got, want)
		}
	}
	var r WatchReader
	if _, err := r.Feed([]byte("f\x00x\x00644\x001\x00\x00/w/a\x00\x00")); err == nil {
		t.Error("a listing with a size that is not a number was read")
	}
}

// watch runs WatchCmd on this machine (the sandbox's tools are the host's here) and returns
// its listings as they come, and its stderr once it ends.
func watch(t *testing.T, ws, dir string) (<-chan []Entry, *bytes.Buffer, <-chan error) {
	t.Helper()
	argv := WatchCmd(ws, dir, 2, 20*time.Millisecond)
	if !IsWatch(argv) || IsWatch([]string{"sh", "-c", "echo"}) {
		t.Fatal("IsWatch does not tell a watch from another command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lists, done := make(chan []Entry, 100), make(chan error, 1)
	go func() {
		var r WatchReader
		b := make([]byte, 4096)
		for {
			n, err := out.Read(b)
			ls, ferr := r.Feed(b[:n])
			for _, l := range ls {
				lists <- l
			}
			if err != nil || ferr != nil {
				done <- cmd.Wait()
				return
			}
		}
	}()
	return lists, &stderr, done
}

func next(t *testing.T, lists <-chan []Entry, what string) []string {
	t.Helper()
	select {
	case l := <-lists:
		var names []string
		for _, e := range l {
			names = append(names, e.Name)
		}
		return names
	case <-time.After(10 * time.Second):
		t.Fatalf("gave up after 10s waiting for a listing with %s", what)
		return nil
	}
}

// ends waits for a watch to end once why, and checks that it said want.
func ends(t *testing.T, done <-chan error, stderr *bytes.Buffer, why, want string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("gave up after 10s waiting for the watch to end once %s", why)
	}
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("the watch ended (%s) saying %q", why, stderr.String())
	}
}

func TestWatchCmd(t *testing.T) {
	ws := t.TempDir()
	dir := filepath.Join(ws, "w")
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644)
	lists, stderr, done := watch(t, ws, dir)
	if got := next(t, lists, "a.txt and sub"); !slices.Equal(got, []string{"a.txt", "sub"}) {
		t.Fatalf("first listing %v", got)
	}
	os.WriteFile(filepath.Join(dir, "sub", "b.txt"), []byte("b"), 0o644)
	if got := next(t, lists, "sub/b.txt"); !slices.Equal(got, []string{"a.txt", "sub", "b.txt"}) {
		t.Fatalf("after a create: %v", got)
	}
	os.Remove(filepath.Join(dir, "a.txt"))
	if got := next(t, lists, "a.txt gone"); !slices.Equal(got, []string{"sub", "b.txt"}) {
		t.Fatalf("after a remove: %v", got)
	}
	// Nothing changes: nothing is printed. The watch is a shell loop in the sandbox with no step
	// to observe from here but what it prints, so this waits out ten of its 20 ms passes.
	select {
	case l := <-lists:
		t.Fatalf("an unchanged folder was listed again: %v", l)
	case <-time.After(200 * time.Millisecond):
	}
	// The folder is replaced by a link out of the workspace: the watch ends, saying so.
	// At once (a rename that exchanges the two): removed first, the folder would be seen gone.
	outside := t.TempDir()
	link := filepath.Join(ws, "link")
	os.Symlink(outside, link)
	if err := unix.Renameat2(unix.AT_FDCWD, link, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(link)
	ends(t, done, stderr, "its folder led outside the workspace", "outside the workspace")

	// A folder removed ends it too.
	os.Remove(dir)
	os.Mkdir(dir, 0o755)
	lists, stderr, done = watch(t, ws, dir)
	next(t, lists, "the empty folder")
	os.Remove(dir)
	ends(t, done, stderr, "its folder was removed", "no longer a folder")
}
