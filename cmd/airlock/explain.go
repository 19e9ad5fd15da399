package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/airlock-dev/airlock/api/apitype"
)

// cmdExplain prints what the gateway would decide for a request of a task token. It exits 0 when
// the request would be allowed and 1 when it would be refused.
func cmdExplain(args []string) int {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	tok := fs.String("token", "", "the task's JWT")
	lease := fs.String("lease", "", "a lease of yours, whose task token is explained")
	method := fs.String("method", "GET", "the request method")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if (*tok == "") == (*lease == "") || fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: airlock explain (--token JWT | --lease LEASE) [--method M] [--json] URL")
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	ex, err := c.Explain(context.Background(), apitype.ExplainRequest{Token: *tok, Lease: *lease, Method: *method, URL: fs.Arg(0)})
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(ex)
	} else {
		fmt.Printf("%s %s %s\n  task       %s\n  rule       %s: %s\n", ex.Decision, ex.Method, ex.URL, ex.Task, ex.Rule, ex.Reason)
		if ex.Scope != nil {
			b, _ := json.Marshal(ex.Scope)
			fmt.Printf("  scope      %s\n", b)
		}
		if ex.Profile != "" {
			fmt.Printf("  profile    %s\n", ex.Profile)
		}
		if ex.Mirror != "" {
			fmt.Printf("  mirror     %s (the request goes there instead)\n", ex.Mirror)
		}
		if ex.Credential != "" {
			fmt.Printf("  credential %s (injected by the gateway; its value never reaches the sandbox)\n", ex.Credential)
		}
		if ex.Upstream != "" {
			fmt.Printf("  upstream   %s\n", ex.Upstream)
		}
		if ex.Hint != "" {
			fmt.Printf("  to allow   %s\n", ex.Hint)
		}
	}
	if ex.Decision != "allow" {
		return 1
	}
	return 0
}
