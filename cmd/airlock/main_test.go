package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The test binary runs airlock's main when AIRLOCK_TEST_MAIN is set, so the tests below see
// exactly what a user does: exit codes, stdout and stderr.
func TestMain(m *testing.M) {
	if os.Getenv("AIRLOCK_TEST_MAIN") == "1" {
		os.Exit(dispatch(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func airlock(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return airlockIn(t, "", env, args...)
}

// airlockIn is airlock with stdin.
func airlockIn(t *testing.T, stdin string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Stdin = strings.NewReader(stdin)
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

// TestHelpForEveryCommand: --help and -h print the command's usage to stdout and exit 0, for
// every command, and for exec also after the lease but not inside the command it runs.
func TestHelpForEveryCommand(t *testing.T) {
	for _, c := range commands {
		for _, h := range []string{"--help", "-h"} {
			out, errs, code := airlock(t, nil, c.name, h)
			if code != 0 || !strings.HasPrefix(out, "usage: airlock "+c.name) || errs != "" {
				t.Errorf("airlock %s %s: exit %d, stdout %q, stderr %q", c.name, h, code, out, errs)
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		if out, _, code := airlock(t, nil, args...); code != 0 || !strings.Contains(out, "Exit codes:") {
			t.Errorf("airlock %v: exit %d %q", args, code, out)
		}
	}
	if out, _, code := airlock(t, nil, "help", "fs"); code != 0 || !strings.HasPrefix(out, "usage: airlock fs") {
		t.Errorf("airlock help fs: %d %q", code, out)
	}
	if out, _, code := airlock(t, nil, "exec", "l-1", "--help"); code != 0 || !strings.HasPrefix(out, "usage: airlock exec") {
		t.Errorf("exec LEASE --help: %d %q", code, out)
	}
	for _, args := range [][]string{{"exec", "l-1", "--", "ls", "--help"}, {"exec", "l-1", "ls", "--help"}, {"exec", "l-1", "--timeout", "5s", "grep", "-h", "x"}} {
		if wantsHelp("exec", args[1:]) {
			t.Errorf("%v: the command's own --help was taken as airlock's", args)
		}
	}
}

// TestExitCodes: 0 done, 1 failed (on stderr), 2 usage errors; exec's own failure is 125.
func TestExitCodes(t *testing.T) {
	if out, _, code := airlock(t, nil, "--version"); code != 0 || !strings.HasPrefix(out, "airlock ") {
		t.Errorf("--version: %d %q", code, out)
	}
	if _, errs, code := airlock(t, nil); code != 2 || !strings.Contains(errs, "usage:") {
		t.Errorf("no command: %d %q", code, errs)
	}
	if _, errs, code := airlock(t, nil, "nope"); code != 2 || !strings.Contains(errs, `unknown command "nope"`) {
		t.Errorf("unknown command: %d %q", code, errs)
	}
	if _, errs, code := airlock(t, nil, "pools", "--nope"); code != 2 || !strings.Contains(errs, "nope") {
		t.Errorf("a bad flag: %d %q", code, errs)
	}
	// No node to talk to: the command fails, saying why, on stderr.
	noNode := []string{"AIRLOCK_ADDR=http://127.0.0.1:1", "AIRLOCK_TOKEN=k"}
	if out, errs, code := airlock(t, noNode, "pools"); code != 1 || out != "" || !strings.HasPrefix(errs, "airlock: ") {
		t.Errorf("pools without a node: %d %q %q", code, out, errs)
	}
	if _, errs, code := airlock(t, noNode, "exec", "l-1", "--", "true"); code != 125 || !strings.HasPrefix(errs, "airlock: ") {
		t.Errorf("exec without a node: %d %q", code, errs)
	}
}

// TestCompletion: the scripts name every command and parse in their shell.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh"} {
		out, _, code := airlock(t, nil, "completion", sh)
		if code != 0 {
			t.Fatalf("completion %s: exit %d", sh, code)
		}
		for _, c := range commands {
			if !strings.Contains(out, c.name+")") {
				t.Errorf("the %s script does not complete %s", sh, c.name)
			}
		}
		if _, err := exec.LookPath(sh); err != nil {
			if sh == "bash" {
				t.Fatal("bash is needed to check the bash script")
			}
			continue // zsh is not installed everywhere; its script is checked where it is
		}
		check := exec.Command(sh, "-n")
		check.Stdin = strings.NewReader(out)
		if b, err := check.CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", sh, err, b)
		}
	}
	// In bash, the words offered after a command are its subcommands and flags.
	out, _, _ := airlock(t, nil, "completion", "bash")
	cmd := exec.Command("bash", "-c", out+"\n_airlock_words fs")
	b, err := cmd.Output()
	if err != nil || !strings.Contains(string(b), "ls stat mkdir rm mv") || !strings.Contains(string(b), "--depth") {
		t.Errorf("bash: words after fs: %q %v", b, err)
	}
}
