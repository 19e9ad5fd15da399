package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/gateway/audit"
	"github.com/airlock-dev/airlock/pool/client"
)

// leasePath splits "LEASE:PATH"; ok is false for a local path.
func leasePath(s string) (lease, path string, ok bool) {
	lease, path, ok = strings.Cut(s, ":")
	if !ok || !strings.HasPrefix(lease, "l-") {
		return "", s, false
	}
	return lease, path, true
}

// cmdCp copies a file into or out of a lease's workspace; "-" is stdin or stdout. With --tar the
// local side is a tar archive and the remote side a directory.
func cmdCp(args []string) int {
	fs := flag.NewFlagSet("cp", flag.ContinueOnError)
	tarMode := fs.Bool("tar", false, "the local side is a tar archive (or '-'), the remote side a directory")
	asJSON := fs.Bool("json", false, "print the transfer as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	args = fs.Args()
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: airlock cp [--tar] SRC DST   (one side LEASE:PATH; '-' is stdin or stdout)")
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	srcLease, srcPath, srcRemote := leasePath(args[0])
	dstLease, dstPath, dstRemote := leasePath(args[1])
	switch {
	case srcRemote == dstRemote:
		fmt.Fprintln(os.Stderr, "airlock cp: exactly one side must be LEASE:PATH")
		return 2
	case dstRemote:
		var in io.Reader = os.Stdin
		if srcPath != "-" {
			f, err := os.Open(srcPath)
			if err != nil {
				return fail(err)
			}
			defer f.Close()
			in = f
		}
		info, err := c.PutFile(ctx, dstLease, dstPath, in, *tarMode)
		if err != nil {
			return fail(err)
		}
		if *asJSON {
			json.NewEncoder(os.Stdout).Encode(info)
		} else {
			fmt.Fprintf(os.Stderr, "%s:%s  %d bytes  sha256 %s\n", dstLease, info.Path, info.Size, info.SHA256)
		}
	default:
		var out io.Writer = os.Stdout
		var f *os.File
		if dstPath != "-" {
			if f, err = os.Create(dstPath); err != nil {
				return fail(err)
			}
			out = f
		}
		sum, err := c.GetFile(ctx, srcLease, srcPath, out, *tarMode)
		if f != nil {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return fail(err)
		}
		if *asJSON && dstPath != "-" {
			json.NewEncoder(os.Stdout).Encode(map[string]string{"path": dstPath, "sha256": sum})
		} else {
			fmt.Fprintf(os.Stderr, "%s  sha256 %s\n", args[1], sum)
		}
	}
	return 0
}

func cmdRenew(args []string) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(os.Stderr, "usage: airlock renew LEASE [--ttl D]")
		return 2
	}
	fs := flag.NewFlagSet("renew", flag.ContinueOnError)
	ttl := fs.Duration("ttl", 0, "new lifetime from now (default: the template's)")
	asJSON := fs.Bool("json", false, "print the lease as JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	l, err := c.Renew(context.Background(), args[0], *ttl)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(l)
		return 0
	}
	fmt.Printf("%s expires %s\n", l.ID, l.Expires.Local().Format(time.RFC3339))
	return 0
}

// cmdLogs prints the tenant's audit records.
func cmdLogs(args []string) int {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	lease := fs.String("lease", "", "only this lease")
	decision := fs.String("decision", "", "allow or deny")
	since := fs.String("since", "", "only records newer than this duration (or RFC 3339 time)")
	follow := fs.Bool("follow", false, "keep printing new records")
	asJSON := fs.Bool("json", false, "print JSON lines")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *decision != "" && *decision != "allow" && *decision != "deny" {
		fmt.Fprintln(os.Stderr, "airlock logs: --decision is allow or deny")
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	q := client.AuditQuery{Lease: *lease, Decision: *decision, Since: *since}
	var lastSeq uint64
	for {
		recs, err := c.Audit(context.Background(), q)
		if err != nil {
			return fail(err)
		}
		for _, r := range recs {
			if r.Seq <= lastSeq {
				continue
			}
			lastSeq = r.Seq
			printRecord(r, *asJSON)
		}
		if !*follow {
			return 0
		}
		if len(recs) > 0 {
			q.Since = recs[len(recs)-1].Time.Format(time.RFC3339Nano)
		}
		time.Sleep(time.Second)
	}
}

func printRecord(r audit.Record, asJSON bool) {
	if asJSON {
		json.NewEncoder(os.Stdout).Encode(r)
		return
	}
	what := r.Host
	switch r.Kind {
	case audit.KindHTTP:
		what = fmt.Sprintf("%s %s:%d%s", r.Method, r.Host, r.Port, r.Path)
	case audit.KindDNS:
		what = r.QName + " " + r.QType
	case audit.KindExec:
		what = strings.Join(r.Command, " ")
	case audit.KindLease:
		what = r.Event
	case audit.KindFile:
		what = fmt.Sprintf("%s %s (%d bytes)", r.Event, r.Path, r.Size)
	}
	fmt.Printf("%s %-5s %-5s %-16s %s %s", r.Time.Local().Format("15:04:05.000"), r.Kind, r.Decision, r.Rule, r.Lease, what)
	if r.Credential != "" {
		fmt.Printf(" [credential %s]", r.Credential)
	}
	if r.Decision == audit.Deny && r.Reason != "" {
		fmt.Printf(" : %s", r.Reason)
	}
	fmt.Println()
}
