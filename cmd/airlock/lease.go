package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/airlock-dev/airlock/api/apitype"
)

type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func cmdLease(args []string) int {
	fs := flag.NewFlagSet("lease", flag.ContinueOnError)
	template := fs.String("template", "", "sandbox template (default: default, or with --from the snapshot's)")
	from := fs.String("from", "", "a snapshot (its id or name) whose workspace the lease starts with")
	noCaches := fs.Bool("no-caches", false, "start with the template's caches empty")
	writeCaches := fs.Bool("write-caches", false, "write the template's caches back when the lease ends, for the tenant's next leases of it")
	tok := fs.String("token", "", "the task's JWT ('-': read it from stdin)")
	ttl := fs.Duration("ttl", 0, "lease lifetime (default: the template's)")
	asJSON := fs.Bool("json", false, "print the lease as JSON")
	var allow multiFlag
	fs.Var(&allow, "allow", "HOST[:PORT][=CREDENTIAL] the dev issuer puts in the minted token (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	raw, err := taskToken(*tok)
	if err != nil {
		return fail(err)
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	// An empty template is the node's default, or the snapshot's with --from.
	req := apitype.LeaseRequest{Template: *template, Token: raw, Allow: allow, From: *from, NoCaches: *noCaches, WriteCaches: *writeCaches}
	if *ttl > 0 {
		req.TTL = ttl.String()
	}
	l, err := c.Lease(context.Background(), req)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(l)
		return 0
	}
	fmt.Println(l.ID)
	fmt.Fprintf(os.Stderr, "lease %s: sandbox %.12s at %s, task %s, expires %s\n", l.ID, l.Sandbox, l.Address, l.Task, l.Expires.Local().Format("15:04:05"))
	if l.Restored != nil {
		fmt.Fprintln(os.Stderr, restoredLine(*l.Restored))
	}
	return 0
}

// cmdLeases lists the tenant's leases.
func cmdLeases(args []string) int {
	fs := flag.NewFlagSet("leases", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	ls, err := c.List(context.Background())
	if err != nil {
		return fail(err)
	}
	return emit(*asJSON, ls, func() {
		for _, l := range ls {
			if l.State == "paused" {
				// A paused lease holds no sandbox; it is released at Expires unless resumed.
				fmt.Printf("%-28s %-14s %-20s paused        until %s\n", l.ID, l.Template, l.Task, when(l.Expires))
				continue
			}
			fmt.Printf("%-28s %-14s %-20s node %-8s expires %s\n", l.ID, l.Template, l.Task, l.Node, l.Expires.Local().Format("15:04:05"))
		}
	})
}

func cmdRelease(args []string) int {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: airlock release [--json] LEASE")
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	if err := c.Release(context.Background(), fs.Arg(0)); err != nil {
		return fail(err)
	}
	return emit(*asJSON, map[string]any{"id": fs.Arg(0), "released": true}, func() { fmt.Fprintf(os.Stderr, "released %s\n", fs.Arg(0)) })
}

func cmdPools(args []string) int {
	fs := flag.NewFlagSet("pools", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	ps, err := c.Pools(context.Background())
	if err != nil {
		return fail(err)
	}
	return emit(*asJSON, ps, func() {
		for _, p := range ps {
			fmt.Printf("%-14s node %-8s runtime %-13s warm %d (target %d of %d-%d)  creating %d  waiting %d  leased %d  max %d\n",
				p.Template, p.Node, p.RuntimeName(), p.Warm, p.Target, p.MinWarm, p.MaxWarm, p.Creating, p.Waiting, p.Leased, p.MaxTotal)
			fmt.Printf("%-14s leases %.2f/s, a sandbox made in %.2fs\n", "", p.LeaseRate, p.CreateSeconds)
			if p.ImageError != "" {
				fmt.Printf("%-14s image: %s\n", "", strings.ReplaceAll(p.ImageError, "\n", "\n"+strings.Repeat(" ", 22)))
			}
		}
	})
}
