package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/airlock-dev/airlock/audit/suggest"
	"github.com/airlock-dev/airlock/client"
)

const suggestUsage = `airlock suggest [--json] LEASE
  from the lease's records: the narrowest scopes that would have allowed exactly what it did
  (hosts, ports, methods, path prefixes, credentials), the scopes granted and never used, and
  the denials a person might want to allow, each with its scope; --json prints the scopes as a
  token's claim ({"scopes": [...]}), ready to sign
`

// cmdSuggest prints the narrowest token for what a lease did.
func cmdSuggest(args []string) int {
	fs := flag.NewFlagSet("suggest", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, `print {"scopes": [...]}, a claim ready to sign`)
	pos, code, ok := parseInterleaved(fs, suggestUsage, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprint(os.Stderr, suggestUsage)
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	lease := pos[0]
	recs, err := c.Audit(context.Background(), client.AuditQuery{Lease: lease})
	if err != nil {
		return fail(err)
	}
	if len(recs) == 0 {
		return fail(fmt.Errorf("the trail holds no record of lease %s for this key", lease))
	}
	s, err := suggest.For(lease, recs)
	if err != nil {
		return fail(err)
	}
	return emit(*asJSON, map[string]any{"scopes": s.Scopes}, func() {
		line := func(v any) string { b, _ := json.Marshal(v); return terminalSafe(string(b)) }
		fmt.Printf("The narrowest token for what lease %s did (scopes: %d):\n", lease, len(s.Scopes))
		for _, sc := range s.Scopes {
			fmt.Println("  " + line(sc))
		}
		if len(s.Unused) > 0 {
			fmt.Println("Granted and never used:")
			for _, u := range s.Unused {
				fmt.Println("  " + terminalSafe(u))
			}
		}
		if len(s.Denied) > 0 {
			fmt.Println("Denied, and what would have allowed it:")
			for _, d := range s.Denied {
				fmt.Printf("  %d× %s: %s\n", d.Count, terminalSafe(d.What), line(d.Scope))
			}
		}
	})
}
