package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/client"
)

const procUsage = `usage: airlock proc start|ls|output|kill|wait LEASE ...
  airlock proc start LEASE [--timeout D] [--workdir DIR] [--env K=V ...] [--json] -- CMD ARGS...
                                        runs CMD in the background; prints its id
  airlock proc ls LEASE [--json]        the lease's background processes
  airlock proc output LEASE PID [--follow]   what it wrote (stdout, then stderr); --follow until it ends
  airlock proc kill LEASE PID [--signal S]   TERM by default; KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT
  airlock proc wait LEASE PID [--timeout D] [--json]   until it ends (its exit code is airlock's)
`

// cmdProc starts, lists, reads, signals and waits for background processes of a lease.
func cmdProc(args []string) int {
	if len(args) == 0 || isHelp(args[0]) {
		return usageOf(procUsage, len(args) == 0)
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("proc "+sub, flag.ContinueOnError)
	timeout := fs.Duration("timeout", 0, "start: kill it after this long; wait: give up after this long")
	workdir := fs.String("workdir", "", "start: the folder it runs in")
	var env multiFlag
	fs.Var(&env, "env", "start: K=V added to its environment (repeatable)")
	asJSON := fs.Bool("json", false, "print JSON")
	follow := fs.Bool("follow", false, "output: keep reading until it ends")
	sig := fs.String("signal", "TERM", "kill: the signal")
	pos, code, ok := parseInterleaved(fs, procUsage, args)
	if !ok {
		return code
	}
	if !subArgs("proc", sub, pos, map[string][2]int{"start": {2, -1}, "ls": {1, 1}, "output": {2, 2}, "kill": {2, 2}, "wait": {2, 2}}, procUsage) {
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	lease := pos[0]
	switch sub {
	case "start":
		req := apitype.ExecRequest{Cmd: pos[1:], Workdir: *workdir, Env: map[string]string{}}
		if *timeout > 0 {
			req.Timeout = timeout.String()
		}
		for _, kv := range env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				fmt.Fprintf(os.Stderr, "airlock proc start: --env %q is not K=V\n", kv)
				return 2
			}
			req.Env[k] = v
		}
		p, err := c.StartProcess(ctx, lease, req)
		if err != nil {
			return fail(err)
		}
		return emit(*asJSON, p, func() { fmt.Println(p.ID) })
	case "ls":
		ps, err := c.Processes(ctx, lease)
		if err != nil {
			return fail(err)
		}
		return emit(*asJSON, ps, func() {
			for _, p := range ps {
				fmt.Printf("%-12s %-14s %s\n", p.ID, processState(p), strings.Join(p.Cmd, " "))
			}
		})
	case "output":
		var q client.OutputQuery
		for {
			if *follow {
				q.Wait = 30 * time.Second
			}
			o, err := c.ProcessOutput(ctx, lease, pos[1], q)
			if err != nil {
				return fail(err)
			}
			os.Stdout.WriteString(o.Stdout)
			os.Stderr.WriteString(o.Stderr)
			q.StdoutOffset, q.StderrOffset = o.StdoutOffset, o.StderrOffset
			if !*follow || (!o.Process.Running && o.Stdout == "" && o.Stderr == "") {
				return 0
			}
		}
	case "kill":
		if err := c.SignalProcess(ctx, lease, pos[1], *sig); err != nil {
			return fail(err)
		}
	case "wait":
		deadline := time.Now().Add(*timeout)
		for {
			left := time.Until(deadline)
			if *timeout == 0 {
				left = apitype.MaxProcessWait
			}
			p, err := c.WaitProcess(ctx, lease, pos[1], min(left, apitype.MaxProcessWait))
			if err != nil {
				return fail(err)
			}
			if !p.Running || (*timeout > 0 && time.Now().After(deadline)) {
				if *asJSON {
					json.NewEncoder(os.Stdout).Encode(p)
				}
				if p.Running {
					fmt.Fprintf(os.Stderr, "airlock: %s still runs after %s\n", p.ID, *timeout)
					return 1
				}
				if p.ExitCode == nil {
					return fail(fmt.Errorf("%s ended without an exit code: %s", p.ID, p.Error))
				}
				return *p.ExitCode
			}
		}
	}
	return 0
}

func processState(p apitype.ProcessInfo) string {
	switch {
	case p.Running:
		return "running"
	case p.ExitCode != nil:
		return fmt.Sprintf("exited %d", *p.ExitCode)
	}
	return "ended: " + p.Error
}
