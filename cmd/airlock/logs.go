package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/export"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/cmd/internal/cli"
)

// cmdLogs prints the tenant's audit records, filtered on the node, page by page.
func cmdLogs(args []string) int {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	var q client.AuditQuery
	fs.StringVar(&q.Lease, "lease", "", "only this lease")
	fs.StringVar(&q.Task, "task", "", "only this task")
	fs.StringVar(&q.Kind, "kind", "", "only this kind: http, dns, exec, lease, file or audit")
	fs.StringVar(&q.Decision, "decision", "", "allow or deny")
	fs.StringVar(&q.Rule, "rule", "", "only decisions of this rule")
	fs.StringVar(&q.Host, "host", "", "only this host (requests and DNS questions)")
	fs.BoolVar(&q.Flagged, "flagged", false, "only records flagged for review (tunnel-shaped DNS)")
	fs.StringVar(&q.Since, "since", "", "only records from this time (RFC 3339) or duration ago")
	fs.StringVar(&q.Until, "until", "", "only records up to this time (RFC 3339) or duration ago")
	limit := fs.Int("limit", 0, "print at most this many records (0: all)")
	follow := fs.Bool("follow", false, "keep printing new records")
	asJSON := fs.Bool("json", false, "print JSON lines (--format json)")
	format := fs.String("format", "text", "text, json (airlock's records), ocsf (OCSF 1.3 events), ecs (Elastic Common Schema), one per line, or csv")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *asJSON {
		*format = "json"
	}
	var out *export.Writer
	if *format != "text" {
		var err error
		if out, err = export.NewWriter(os.Stdout, *format); err != nil {
			fmt.Fprintf(os.Stderr, "airlock logs: --format: %v (or text)\n", err)
			return 2
		}
		defer out.Flush()
	}
	if decision := q.Decision; decision != "" && decision != "allow" && decision != "deny" {
		fmt.Fprintln(os.Stderr, "airlock logs: --decision is allow or deny")
		return 2
	}
	// A duration is turned into a time once, so every page asks for the same window.
	for _, v := range []*string{&q.Since, &q.Until} {
		if *v == "" {
			continue
		}
		t, err := cli.ParseSince(*v)
		if err != nil {
			fmt.Fprintln(os.Stderr, "airlock logs:", strings.Replace(err.Error(), "--since", "--since/--until", 1))
			return 2
		}
		*v = t.UTC().Format(time.RFC3339Nano)
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	printed, warned := 0, 0
	for {
		if *limit > 0 {
			q.Limit = min(*limit-printed, audit.MaxPage)
		}
		page, err := c.AuditPage(context.Background(), q)
		if err != nil {
			return fail(err)
		}
		if len(page.Problems) > warned {
			// The records that verify are still shown; say once what did not, and any index
			// the node found tampered with (its segment's records were read without it).
			fmt.Fprintln(os.Stderr, "airlock: warning: the node's audit trail has problems (records that failed verification are not shown; a tampered index is named):",
				terminalSafe((&audit.TrailError{Path: "trail", Problems: page.Problems}).Error()))
			warned = len(page.Problems)
		}
		for _, r := range page.Records {
			if out != nil {
				if err := out.Write(r); err != nil {
					return fail(err)
				}
				continue
			}
			printRecord(os.Stdout, r)
		}
		if out != nil {
			out.Flush() // a follower sees each page as it comes
		}
		printed += len(page.Records)
		q.After = page.Next
		switch {
		case *limit > 0 && printed >= *limit:
			return 0
		case page.More:
			continue
		case !*follow:
			return 0
		}
		// Following: the cursor picks up exactly after the last record printed.
		q.Since = ""
		time.Sleep(time.Second)
	}
}

// printRecord writes r as one line of text, every field through terminalSafe, so a recorded path
// or name cannot move the cursor, recolour or forge lines on a reviewer's screen (the other
// formats are audit/export's).
func printRecord(w io.Writer, r audit.Record) {
	what := r.Host
	switch r.Kind {
	case audit.KindHTTP:
		what = fmt.Sprintf("%s %s:%d%s", r.Method, r.Host, r.Port, r.Path)
	case audit.KindDNS:
		what = r.QName + " " + r.QType
	case audit.KindExec:
		what = strings.Join(r.Command, " ")
	case audit.KindLease:
		what = string(r.Event)
	case audit.KindFile:
		what = fmt.Sprintf("%s %s (%d bytes)", r.Event, r.Path, r.Size)
	}
	t := terminalSafe
	fmt.Fprintf(w, "%s %-5s %-5s %-16s %s %s", r.Time.Local().Format("15:04:05.000"), t(string(r.Kind)), t(string(r.Decision)),
		t(r.Rule.String()), t(r.Lease), t(what))
	if r.Credential != "" {
		fmt.Fprintf(w, " [credential %s]", t(r.Credential))
	}
	if r.Decision == audit.Deny && r.Reason != "" {
		fmt.Fprintf(w, " : %s", t(r.Reason))
	}
	fmt.Fprintln(w)
}

// terminalSafe is how every listing prints what it did not write itself (cli.TerminalSafe).
func terminalSafe(s string) string { return cli.TerminalSafe(s) }
