package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/airlock-dev/airlock/api/apitype"
)

// The state that travels: snapshot, snapshots, pause and resume (lease --from is lease.go's).

const snapshotUsage = `airlock snapshot LEASE [--name N] [--path P ...] [--json]
  captures the lease's workspace while it runs (and each path the template declares that --path
  names); prints the snapshot's id, which 'airlock lease --from' takes, as it takes the name
`

const snapshotsUsage = `usage: airlock snapshots [ls | show REF | rm REF ...] [--json]
  airlock snapshots [ls] [--json]      your snapshots, newest first
  airlock snapshots show REF [--json]  one of them; REF is its id (sha256:...) or its name
  airlock snapshots rm REF ...         deletes them; leases started from one keep what they restored
`

const pauseUsage = `airlock pause LEASE [--memory] [--keep] [--json]
  releases the lease's sandbox and binding and keeps its state until it is resumed or its
  template's max_paused passes; prints what was kept: files, or memory+files when --memory asked
  for running processes too and the runtime could keep them (else why not); every credential
  minted for the lease is revoked; --keep makes the state a snapshot (paused-LEASE) should the
  lease expire paused, instead of deleting it
`

const resumeUsage = `airlock resume LEASE (--token JWT | --allow HOST[:PORT][=CREDENTIAL] ...) [--ttl D] [--json]
  brings a paused lease back in a new sandbox under a new binding, bound to JWT: a task token for
  the lease's task (a paused lease keeps none; '--token -' reads it from stdin), or, on a node
  that mints tokens, one it mints for the lease's task with the scopes --allow gives; prints its id
`

func cmdSnapshot(args []string) int {
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	name := fs.String("name", "", "a name to find it by, instead of its id")
	var paths multiFlag
	fs.Var(&paths, "path", "a writable path the template declares for snapshots, kept besides the workspace (repeatable)")
	asJSON := fs.Bool("json", false, "print the snapshot as JSON")
	pos, code, ok := parseInterleaved(fs, snapshotUsage, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprint(os.Stderr, "usage: "+snapshotUsage)
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	v, err := c.Snapshot(context.Background(), pos[0], *name, paths)
	if err != nil {
		return fail(err)
	}
	return emit(*asJSON, v, func() {
		fmt.Println(v.ID)
		fmt.Fprintf(os.Stderr, "snapshot of %s%s: %d files, %s (%s stored), in %d ms\n", v.Lease, quotedName(v.Name), v.Files,
			byteSize(v.Size), byteSize(v.Stored), v.TookMS)
	})
}

// cmdSnapshots lists, shows and deletes the tenant's snapshots.
func cmdSnapshots(args []string) int {
	sub := "ls"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	if isHelp(sub) {
		return usageOf(snapshotsUsage, false)
	}
	fs := flag.NewFlagSet("snapshots "+sub, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, code, ok := parseInterleaved(fs, snapshotsUsage, args)
	if !ok {
		return code
	}
	if !subArgs("snapshots", sub, pos, map[string][2]int{"ls": {0, 0}, "show": {1, 1}, "rm": {1, -1}}, snapshotsUsage) {
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	switch sub {
	case "ls":
		ss, err := c.Snapshots(ctx)
		if err != nil {
			return fail(err)
		}
		return emit(*asJSON, ss, func() {
			for _, s := range ss {
				name := s.Name
				switch {
				case name == "":
					name = "-"
				case strings.ContainsFunc(name, unicode.IsSpace) || terminalSafe(name) != name || name[0] == '"':
					// One column, which completion reads: a name of words, or one a terminal
					// would act on, is quoted (and escaped).
					name = strconv.Quote(name)
				}
				fmt.Printf("%s  %-20s %-14s %10s %7d files  %s  from %s\n", s.ID, name, s.Template, byteSize(s.Size), s.Files,
					when(s.Created), s.Lease)
			}
		})
	case "show":
		s, err := c.SnapshotInfo(ctx, pos[0])
		if err != nil {
			return fail(err)
		}
		return emit(*asJSON, s, func() {
			if s.Name == "" {
				s.Name = "-"
			}
			fmt.Printf("id        %s\nname      %s\ntemplate  %s\nimage     %s\nfrom      lease %s\ntaken     %s\n"+
				"size      %s in %d files (%s stored, encrypted)\npaths     %s\n",
				s.ID, terminalSafe(s.Name), s.Template, s.Image, s.Lease, s.Created.Local().Format(time.RFC3339),
				byteSize(s.Size), s.Files, byteSize(s.Stored), strings.Join(append([]string{"the workspace"}, s.Paths...), ", "))
		})
	}
	failed := 0
	for _, ref := range pos {
		if err := c.DeleteSnapshot(ctx, ref); err != nil {
			fail(fmt.Errorf("%s: %w", terminalSafe(ref), err))
			failed++
			continue
		}
		emit(*asJSON, map[string]any{"ref": ref, "deleted": true}, func() { fmt.Fprintf(os.Stderr, "deleted %s\n", terminalSafe(ref)) })
	}
	if failed > 0 {
		return 1
	}
	return 0
}

func cmdPause(args []string) int {
	fs := flag.NewFlagSet("pause", flag.ContinueOnError)
	memory := fs.Bool("memory", false, "keep running processes too, where the runtime can checkpoint them")
	keep := fs.Bool("keep", false, "should the lease expire paused, keep its state as a snapshot")
	asJSON := fs.Bool("json", false, "print the pause as JSON")
	pos, code, ok := parseInterleaved(fs, pauseUsage, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprint(os.Stderr, "usage: "+pauseUsage)
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	p, err := c.PauseWith(context.Background(), pos[0], apitype.PauseRequest{Memory: *memory, Keep: *keep})
	if err != nil {
		return fail(err)
	}
	return emit(*asJSON, p, func() {
		fmt.Printf("kept: %s\n", p.Kept)
		if p.Why != "" {
			fmt.Printf("why: %s\n", terminalSafe(p.Why))
		}
		fmt.Fprintf(os.Stderr, "paused %s (task %s) in %d ms; released at %s unless resumed: airlock resume %s --token JWT\n",
			p.Lease, p.Task, p.TookMS, when(p.Until), p.Lease)
	})
}

func cmdResume(args []string) int {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	tok := fs.String("token", "", "a task token for the paused lease's task ('-': read it from stdin)")
	var allow multiFlag
	fs.Var(&allow, "allow", "HOST[:PORT][=CREDENTIAL] for a token the node mints for the lease's task (repeatable)")
	ttl := fs.Duration("ttl", 0, "lease lifetime from now (default: the template's)")
	asJSON := fs.Bool("json", false, "print the lease as JSON")
	pos, code, ok := parseInterleaved(fs, resumeUsage, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || (*tok == "") == (len(allow) == 0) {
		if len(pos) == 1 {
			fmt.Fprintln(os.Stderr, "airlock resume: give --token or --allow (not both): a paused lease keeps no task token, and the one it had was revoked")
		}
		fmt.Fprint(os.Stderr, "usage: "+resumeUsage)
		return 2
	}
	req := apitype.ResumeRequest{Allow: allow}
	if *tok != "" {
		raw, err := taskToken(*tok)
		if err != nil {
			return fail(err)
		}
		req.Token = raw
	}
	if *ttl > 0 {
		req.TTL = ttl.String()
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	l, err := c.ResumeWith(context.Background(), pos[0], req)
	if err != nil {
		return fail(err)
	}
	return emit(*asJSON, l, func() {
		fmt.Println(l.ID)
		fmt.Fprintf(os.Stderr, "resumed %s: sandbox %.12s at %s, task %s, expires %s\n", l.ID, l.Sandbox, l.Address, l.Task, when(l.Expires))
		if l.Restored != nil {
			fmt.Fprintln(os.Stderr, restoredLine(*l.Restored))
		}
	})
}

// taskToken is the task token a --token flag gives: the value, or with "-" what stdin holds
// (so it is not in the process list).
func taskToken(v string) (string, error) {
	if v != "-" {
		return v, nil
	}
	b, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<10))
	if err != nil {
		return "", fmt.Errorf("reading the task token from stdin: %w", err)
	}
	if t := strings.TrimSpace(string(b)); t != "" {
		return t, nil
	}
	return "", errors.New("--token -: stdin held no task token")
}

// restoredLine says what a lease from a snapshot, or a resume, restored and how long it took.
func restoredLine(r apitype.Restored) string {
	return fmt.Sprintf("restored %d files (%s) from %s in %d ms", r.Files, byteSize(r.Size), r.Snapshot, r.TookMS)
}

func quotedName(name string) string {
	if name == "" {
		return ""
	}
	return fmt.Sprintf(" (%q)", name)
}

// when is a time in local time: the time of day today, with the date otherwise.
func when(t time.Time) string {
	t = t.Local()
	if t.Format(time.DateOnly) == time.Now().Format(time.DateOnly) {
		return t.Format(time.TimeOnly)
	}
	return t.Format("Jan 2 15:04:05")
}

// byteSize is n bytes in the largest binary unit that keeps it at 1 or more.
func byteSize(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, unit := float64(n), ""
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f, unit = f/1024, u
		if f < 1024 {
			break
		}
	}
	return fmt.Sprintf("%.1f %s", f, unit)
}
