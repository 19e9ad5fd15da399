package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/airlock-dev/airlock/api/apitype"
)

const execUsage = `usage: airlock exec LEASE [-i] [-t] [--timeout D] [--] CMD ARGS...
  -i  stream this terminal's stdin to the command
  -t  run it on a terminal: this one in raw mode when stdin is one, resized with it
  --timeout D  kill the command (and all it started) after this long
The exit code is the command's; airlock's own failures exit 125. A request the gateway refuses
is answered, inside the sandbox, with the rule, the reason and what would allow it (airlock
explain, given the lease, says the same).
`

func cmdExec(args []string) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 0, "kill the command (and all it started) after this long")
	interactive := fs.Bool("i", false, "stream this terminal's stdin to the command")
	tty := fs.Bool("t", false, "run the command on a terminal")
	pos, code, ok := parseFlags(fs, execUsage, args, 1)
	if !ok {
		return code
	}
	if len(pos) < 2 {
		fmt.Fprint(os.Stderr, execUsage)
		return 2
	}
	id := pos[0]
	c, err := newClient()
	if err != nil {
		return failExec(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	req := apitype.ExecRequest{Cmd: pos[1:]}
	if *timeout > 0 {
		req.Timeout = timeout.String()
	}
	if *tty {
		code, err = execTTY(ctx, id, req, *interactive)
	} else {
		var stdin io.Reader
		if *interactive {
			stdin = os.Stdin
		}
		code, err = c.ExecStdin(ctx, id, req, stdin, os.Stdout, os.Stderr)
	}
	if err != nil {
		return failExec(err)
	}
	return code
}

// execTTY runs req on a terminal in the sandbox. When stdin is a terminal it is put in raw mode
// for the command's life (keys, Ctrl-C included, go to the command), and every change of its
// size (SIGWINCH) is sent on. Input goes only with -i or when stdin is a terminal.
func execTTY(ctx context.Context, id string, req apitype.ExecRequest, interactive bool) (int, error) {
	c, err := newClient()
	if err != nil {
		return -1, err
	}
	fd := int(os.Stdin.Fd())
	isTerm := term.IsTerminal(fd)
	size := func() apitype.TermSize {
		if w, h, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
			return apitype.TermSize{Rows: uint16(h), Cols: uint16(w)}
		}
		return apitype.TermSize{Rows: 24, Cols: 80}
	}
	sz := size()
	req.Rows, req.Cols, req.Term = sz.Rows, sz.Cols, os.Getenv("TERM")
	resize := make(chan apitype.TermSize, 1)
	var stdin io.Reader
	if isTerm || interactive {
		stdin = os.Stdin
	}
	if isTerm {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return -1, fmt.Errorf("putting the terminal in raw mode: %w", err)
		}
		defer term.Restore(fd, old)
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				select {
				case resize <- size():
				default:
				}
			}
		}()
	}
	return c.ExecTTY(ctx, id, req, stdin, resize, os.Stdout)
}
