package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/cmd/internal/cli"
	"github.com/airlock-dev/airlock/node"
)

// cmdAudit runs audit's subcommands.
func cmdAudit(args []string) int {
	if len(args) == 0 || args[0] != "verify" {
		fmt.Fprint(os.Stderr, cli.AuditUsage)
		return 2
	}
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	dir := fs.String("dir", "", "the trail's directory (default: the local node's)")
	key := fs.String("key", "", "the node's public checkpoint key, or a file holding it (default: the local node's audit-key.pub)")
	since := fs.String("since", "", "check only the segments holding records from this time (RFC 3339) or duration ago (as their sealed indexes say; every segment without --key)")
	lease := fs.String("lease", "", "check only the segments holding this lease's records (as their sealed indexes say; every segment without --key)")
	latest := fs.String("latest", "", "a file holding the node's latest signed checkpoint (default: read from the node's Redis)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "airlock audit verify: unexpected argument %q\n%s", fs.Arg(0), cli.AuditUsage)
		return 2
	}
	local, localErr := node.ReadClientFile(cli.StateDir())
	if *dir == "" {
		*dir = local.Audit
		if *dir == "" {
			*dir = filepath.Join(cli.StateDir(), "audit")
		}
	}
	opt := audit.VerifyOptions{Lease: *lease}
	if *since != "" {
		t, err := cli.ParseSince(*since)
		if err != nil {
			fmt.Fprintln(os.Stderr, "airlock audit verify:", err)
			return 2
		}
		opt.Since = t
	}
	v, err := cli.VerifierKey(*key)
	if err != nil {
		return fail(err)
	}
	opt.Verifier = v
	latestFrom := ""
	switch {
	case *latest != "":
		b, err := os.ReadFile(*latest)
		if err != nil {
			return fail(err)
		}
		opt.Latest, latestFrom = b, *latest
	case localErr == nil && local.RedisURL != "" && local.Node != "":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b, err := node.LatestCheckpoint(ctx, local.RedisURL, local.Deployment, local.Node)
		cancel()
		if err != nil {
			latestFrom = "not compared (Redis: " + err.Error() + ")"
		} else {
			opt.Latest, latestFrom = b, "Redis"
		}
	default:
		latestFrom = "not compared (no --latest, and no local node to ask)"
	}
	rep, err := audit.Verify(*dir, opt)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		e := json.NewEncoder(os.Stdout)
		e.SetIndent("", "  ")
		e.Encode(rep)
	} else {
		for _, l := range strings.Split(strings.TrimSuffix(rep.String(), "\n"), "\n") {
			fmt.Println(cli.TerminalSafe(l)) // segment names and reasons come from files anyone could edit
		}
		fmt.Printf("Latest checkpoint: %s\n", latestFrom)
	}
	if !rep.OK() {
		return 1
	}
	return 0
}
