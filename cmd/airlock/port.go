package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
)

// cmdPort exposes one port of a lease's sandbox for review and prints its URL.
func cmdPort(args []string) int {
	fs := flag.NewFlagSet("port", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the port as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	args = fs.Args()
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: airlock port [--json] LEASE PORT")
		return 2
	}
	port, err := strconv.Atoi(args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock port: %q is not a port number\n", args[1])
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	v, err := c.Port(context.Background(), args[0], port)
	if err != nil {
		return fail(err)
	}
	return emit(*asJSON, v, func() {
		fmt.Println(v.URL)
		fmt.Fprintf(os.Stderr, "port %d of %s, on a listener of its own; the URL is the credential, and closes with the lease\n", v.Port, v.Lease)
	})
}
