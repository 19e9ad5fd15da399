package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"

	"github.com/airlock-dev/airlock/pool"
)

// This file is the airlock CLI run against a node: commands, leases, exec, and what they print.

// cli runs the airlock CLI against the node and returns stdout, stderr and the exit code.
func (n *nodeProc) cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return n.cliStdin(t, nil, args...)
}

// cliStdin is cli with stdin.
func (n *nodeProc) cliStdin(t *testing.T, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, airlockBin, args...)
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), "AIRLOCK_STATE_DIR="+n.state, "AIRLOCK_ADDR=", "AIRLOCK_TOKEN=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("airlock %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

type leaseJSON struct {
	ID      string `json:"id"`
	Node    string `json:"node"`
	Sandbox string `json:"sandbox"`
	Address string `json:"address"`
	Task    string `json:"task"`
	Start   string `json:"start"`
}

// lease leases a sandbox from the dev issuer with the scopes given (`host[=credential]`); it is
// released when t ends.
func (n *nodeProc) lease(t *testing.T, allow ...string) leaseJSON {
	t.Helper()
	var args []string
	for _, a := range allow {
		args = append(args, "--allow", a)
	}
	return n.leaseWith(t, args...)
}

// leaseWith is `airlock lease --json` with the arguments given; the lease is released when t
// ends.
func (n *nodeProc) leaseWith(t *testing.T, args ...string) leaseJSON {
	t.Helper()
	if n.template != "" && !slices.Contains(args, "--template") {
		args = append([]string{"--template", n.template}, args...)
	}
	out, errs, code := n.cli(t, append([]string{"lease", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("airlock lease: exit %d: %s", code, errs)
	}
	var l leaseJSON
	if err := json.Unmarshal([]byte(out), &l); err != nil || l.ID == "" {
		t.Fatalf("airlock lease --json printed %q: %v", out, err)
	}
	t.Cleanup(func() { n.cli(t, "release", l.ID) })
	return l
}

// leaseRefused runs `airlock lease --json` with args, which should be refused, and returns
// its exit code and stderr; a lease it did make is released at once.
func (n *nodeProc) leaseRefused(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, errs, code := n.cli(t, append([]string{"lease", "--json"}, args...)...)
	var l leaseJSON
	if code == 0 && json.Unmarshal([]byte(out), &l) == nil && l.ID != "" {
		n.cli(t, "release", l.ID)
	}
	return code, errs
}

// goClient is the Go client of the node's API, with the token the node wrote for its CLI.
func (n *nodeProc) goClient() *client.Client {
	return &client.Client{Addr: n.client.Addr, Token: n.client.Token}
}

func (n *nodeProc) exec(t *testing.T, id string, cmd ...string) (string, string, int) {
	t.Helper()
	return n.cli(t, append([]string{"exec", id, "--timeout", "60s", "--"}, cmd...)...)
}

// lines returns the non-empty lines of s.
func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// settled reports whether template's pool on n holds what it aims at (its warm target, at
// least min_warm) with nothing being made, with the pool's status and what `airlock pools
// --json` showed.
func (n *nodeProc) settled(t *testing.T, template string) (pool.PoolStatus, bool, string) {
	t.Helper()
	out, errs, code := n.cli(t, "pools", "--json")
	if code != 0 {
		return pool.PoolStatus{}, false, errs
	}
	var ps []pool.PoolStatus
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		return pool.PoolStatus{}, false, out
	}
	for _, p := range ps {
		if p.Template == template {
			return p, p.Warm >= p.MinWarm && p.Warm == p.Target && p.Creating == 0, out
		}
	}
	return pool.PoolStatus{}, false, out
}

// abandonExec runs script in lease through the Go client, with no timeout, until it has printed
// "started", and then goes away (its context cancelled), as a caller that hangs up does.
func (n *nodeProc) abandonExec(t *testing.T, lease, script string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := n.goClient().Exec(ctx, lease, api.ExecRequest{Cmd: []string{"sh", "-c", script}}, &out, io.Discard)
		done <- err
	}()
	eventually(t, 30*time.Second, "the command to start", func() bool { return strings.Contains(out.String(), "started") })
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("gave up after 30s waiting for the cancelled exec to return")
	}
}
