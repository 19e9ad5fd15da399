package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/airlock-dev/airlock/pool/api"
)

func cmdExec(args []string) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(os.Stderr, "usage: airlock exec LEASE [-i] [--timeout D] -- CMD ARGS...")
		return 2
	}
	id := args[0]
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 0, "kill the command (and all it started) after this long")
	interactive := fs.Bool("i", false, "stream this terminal's stdin to the command")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: airlock exec LEASE [-i] [--timeout D] -- CMD ARGS...")
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	req := api.ExecRequest{Cmd: fs.Args()}
	if *timeout > 0 {
		req.Timeout = timeout.String()
	}
	var stdin io.Reader
	if *interactive {
		stdin = os.Stdin
	}
	code, err := c.ExecStdin(ctx, id, req, stdin, os.Stdout, os.Stderr)
	if err != nil {
		return fail(err)
	}
	return code
}
