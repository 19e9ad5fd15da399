package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/airlock-dev/airlock/audit/receipt"
	"github.com/airlock-dev/airlock/cmd/internal/cli"
)

const receiptUsage = `airlock receipt [--signed] [--key PUB] LEASE
airlock receipt --verify FILE [--key PUB]
  a lease's signed receipt (live or ended): template and runtime, scopes granted and used, each
  destination with counts and bytes, credentials injected (names), denials, DNS names never
  connected to, commands with their streams' hashes, workspace changes, and the checkpoint that
  covers it; --signed prints the signed note to keep, --verify checks one offline
`

// cmdReceipt fetches, or checks, a lease's receipt.
func cmdReceipt(args []string) int {
	fs := flag.NewFlagSet("receipt", flag.ContinueOnError)
	signed := fs.Bool("signed", false, "print the signed note as the node sent it")
	key := fs.String("key", "", "the node's public checkpoint key, or a file holding it (default: the local node's)")
	verify := fs.String("verify", "", "check the signed receipt in this file offline")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if (*verify == "") == (fs.NArg() != 1) {
		fmt.Fprint(os.Stderr, receiptUsage)
		return 2
	}
	var msg []byte
	var err error
	if *verify != "" {
		if msg, err = os.ReadFile(*verify); err != nil {
			return fail(err)
		}
	} else {
		c, cerr := newClient()
		if cerr != nil {
			return fail(cerr)
		}
		if msg, err = c.Receipt(context.Background(), fs.Arg(0)); err != nil {
			return fail(err)
		}
		if *signed {
			os.Stdout.Write(msg)
			return 0
		}
	}
	v, err := cli.VerifierKey(*key)
	if err != nil {
		return fail(err)
	}
	r, err := receipt.Open(msg, v)
	if err != nil {
		return fail(err)
	}
	e := json.NewEncoder(os.Stdout)
	e.SetIndent("", "  ")
	e.Encode(r)
	fmt.Fprintf(os.Stderr, "airlock: receipt verified with %s; its checkpoint covers seq %d\n", v.Name(), r.Records.Last)
	return 0
}
