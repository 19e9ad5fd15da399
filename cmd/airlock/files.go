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
	return emit(*asJSON, l, func() { fmt.Printf("%s expires %s\n", l.ID, l.Expires.Local().Format(time.RFC3339)) })
}
