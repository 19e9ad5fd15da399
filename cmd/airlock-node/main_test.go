package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/cmd/internal/cli"
)

// The test binary runs airlock-node's main when AIRLOCK_TEST_MAIN is set, so the tests below see
// exactly what a user does: exit codes, stdout and stderr.
func TestMain(m *testing.M) {
	if os.Getenv("AIRLOCK_TEST_MAIN") == "1" {
		os.Exit(dispatch(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func airlock(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	// Under -race a process waits a second as it exits unless told otherwise; these run many.
	cmd.Env = append(append(os.Environ(), "AIRLOCK_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0", "AIRLOCK_STATE_DIR="+t.TempDir()), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// Every command the client hands over is served here, with its usage for --help.
func TestServesEveryNodeCommand(t *testing.T) {
	for _, c := range cli.NodeCommands {
		if runners[c.Name] == nil {
			t.Errorf("the client hands %q over, and airlock-node has no runner for it", c.Name)
		}
		out, errs, code := airlock(t, nil, c.Name, "--help")
		if code != 0 || !strings.HasPrefix(out, "usage: airlock "+c.Name) || errs != "" {
			t.Errorf("airlock-node %s --help: exit %d, stdout %q, stderr %q", c.Name, code, out, errs)
		}
	}
	if _, errs, code := airlock(t, nil, "lease"); code != 2 || !strings.Contains(errs, `unknown command "lease"`) {
		t.Errorf("a client command: exit %d %q", code, errs)
	}
	if out, _, code := airlock(t, nil, "--version"); code != 0 || !strings.HasPrefix(out, "airlock-node ") {
		t.Errorf("--version: %d %q", code, out)
	}
}
