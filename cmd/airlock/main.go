// Command airlock talks to an airlock node (lease, exec, release, ...) and links no server: the
// node's own commands (up, audit verify, image build, template build) are handed over to
// airlock-node, installed beside it (cli.HandOver).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/airlock-dev/airlock/cmd/internal/cli"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

// command is one of airlock's commands: its usage (the first line is the synopsis the overall
// usage lists), what runs it, and the subcommands and flags shell completion offers.
type command struct {
	name, usage string
	run         func([]string) int
	subs        []string
}

var commands []command

func init() {
	commands = []command{
		nodeCommand("up"),
		{"lease", "airlock lease [--template T] [--from SNAPSHOT] (--token JWT | --allow HOST[:PORT][=CREDENTIAL] ...) [--ttl D] [--no-caches] [--write-caches] [--json]\n  leases a warm sandbox; prints its id (--allow: the dev issuer mints the token; @NAME is a profile;\n  --from: its workspace restored from a snapshot first, and how long that took said; --no-caches:\n  the template's caches start empty; --write-caches: written back when the lease ends, for your next\n  leases of the template)\n", cmdLease, nil},
		{"leases", "airlock leases [--json]\n  your leases, running and paused\n", cmdLeases, nil},
		{"exec", execUsage, cmdExec, nil},
		{"cp", "airlock cp [--tar] [--json] SRC DST\n  copies a file (with --tar a directory, as a tar archive) into or out of a workspace: one side\n  is LEASE:PATH; '-' is stdin or stdout\n", cmdCp, nil},
		{"fs", fsUsage, cmdFs, []string{"ls", "stat", "mkdir", "rm", "mv"}},
		{"proc", procUsage, cmdProc, []string{"start", "ls", "output", "kill", "wait"}},
		{"renew", "airlock renew LEASE [--ttl D] [--json]\n  extends a lease, never past its task token's expiry\n", cmdRenew, nil},
		{"release", "airlock release [--json] LEASE\n  destroys the sandbox and everything in it (of a paused lease, what its pause kept)\n", cmdRelease, nil},
		{"snapshot", snapshotUsage, cmdSnapshot, nil},
		{"snapshots", snapshotsUsage, cmdSnapshots, []string{"ls", "show", "rm"}},
		{"pause", pauseUsage, cmdPause, nil},
		{"resume", resumeUsage, cmdResume, nil},
		{"logs", "airlock logs [--lease ID] [--decision allow|deny] [--since D] [--follow] [--json | --format text|json|ocsf|ecs|csv]\n  your audit records; ocsf and ecs print them in the schemas SIEMs take\n", cmdLogs, nil},
		nodeCommand("audit"),
		{"receipt", receiptUsage, cmdReceipt, nil},
		{"suggest", suggestUsage, cmdSuggest, nil},
		{"approvals", approvalsUsage, cmdApprovals, nil},
		{"approve", approveUsage, cmdApprove, nil},
		{"deny", denyUsage, cmdDeny, nil},
		{"explain", "airlock explain (--token JWT | --lease LEASE) [--method M] [--json] URL\n  the gateway's decision for a request, its rule and reason, and the scope that would allow it;\n  exits 0 when allowed, 1 when refused\n", cmdExplain, nil},
		{"port", "airlock port [--json] LEASE PORT\n  a URL, on a listener of its own, that reaches that port of the sandbox until release\n", cmdPort, nil},
		{"verify", "airlock verify [--template T] [--token JWT] [--json]\n  leases a sandbox and checks the invariants from inside it\n", cmdVerify, nil},
		{"mcp", mcpUsage, cmdMCP, nil},
		nodeCommand("image"),
		nodeCommand("template"),
		{"pools", "airlock pools [--json]\n  each template's pool: runtime, warm and its target, creating, waiting, leased, the lease rate and create time\n", cmdPools, nil},
		{"completion", "airlock completion bash|zsh\n  a shell completion script: source <(airlock completion bash)\n", cmdCompletion, []string{"bash", "zsh"}},
		{"version", "airlock version (or airlock --version)\n", func([]string) int { fmt.Println("airlock", version); return 0 }, nil},
		{"help", "airlock help [COMMAND]\n", cmdHelp, nil},
	}
}

// nodeCommand is one of the node's commands (cli.NodeCommands): listed, completed and described
// here, and run by handing it over to airlock-node.
func nodeCommand(name string) command {
	c, _ := cli.NodeCommand(name)
	return command{c.Name, c.Usage, func(args []string) int {
		return fail(cli.HandOver(name, args))
	}, c.Subs}
}

const exitCodes = `Exit codes: 0 done; 1 the command failed (the error is on stderr); 2 a usage error. exec (and
proc wait) exit with the command's own code, and exec with 125 when airlock itself failed.
`

func usage() string {
	var b strings.Builder
	b.WriteString("airlock: secret-free sandboxes for AI coding agents, with one guarded way out\n\nusage:\n")
	for _, c := range commands {
		first, _, _ := strings.Cut(c.usage, "\n")
		b.WriteString("  " + strings.TrimPrefix(first, "usage: ") + "\n")
	}
	b.WriteString("\nairlock COMMAND --help describes one. Client commands find a local 'airlock up' through its\nstate dir, or use AIRLOCK_ADDR and AIRLOCK_TOKEN.\n")
	b.WriteString(exitCodes)
	return b.String()
}

func find(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func main() { os.Exit(dispatch(os.Args[1:])) }

func dispatch(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage())
		return 2
	}
	switch args[0] {
	case "-h", "--help":
		fmt.Print(usage())
		return 0
	case "--version", "-version":
		fmt.Println("airlock", version)
		return 0
	}
	c := find(args[0])
	if c == nil {
		fmt.Fprintf(os.Stderr, "airlock: unknown command %q\n\n%s", args[0], usage())
		return 2
	}
	if wantsHelp(c.name, args[1:]) {
		fmt.Print(commandUsage(c))
		return 0
	}
	return c.run(args[1:])
}

func commandUsage(c *command) string {
	u := c.usage
	if !strings.HasPrefix(u, "usage:") {
		u = "usage: " + u
	}
	return u
}

// wantsHelp reports whether args ask for a command's usage (-h, --help or -help), looking only
// at airlock's own arguments: not past "--", nor into the command exec runs.
func wantsHelp(cmd string, args []string) bool {
	positional := 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return false
		case a == "-h" || a == "--help" || a == "-help":
			return true
		case !strings.HasPrefix(a, "-"):
			positional++
			// exec LEASE CMD...: what follows the lease is the command's.
			if cmd == "exec" && positional == 2 {
				return false
			}
		case (cmd == "exec" || cmd == "proc") && (a == "--timeout" || a == "-timeout" || a == "--workdir" || a == "--env" || a == "--signal"):
			i++ // its value
		}
	}
	return false
}

func cmdHelp(args []string) int {
	if len(args) == 0 {
		fmt.Print(usage())
		return 0
	}
	c := find(args[0])
	if c == nil {
		fmt.Fprintf(os.Stderr, "airlock help: unknown command %q\n", args[0])
		return 2
	}
	fmt.Print(commandUsage(c))
	return 0
}

// fail prints err the same way for every command and returns 1, the exit code of a command
// that failed.
func fail(err error) int {
	fmt.Fprintln(os.Stderr, "airlock:", err)
	return 1
}

// failExec is fail for exec, whose exit code is otherwise the command's: 125, as docker run
// does, tells airlock's own failure apart.
func failExec(err error) int {
	fmt.Fprintln(os.Stderr, "airlock:", err)
	return 125
}

// emit prints v as one line of JSON when asJSON is set (every command's --json), and otherwise
// calls text; it returns 0, the exit code of a command that printed its result.
func emit(asJSON bool, v any, text func()) int {
	if asJSON {
		json.NewEncoder(os.Stdout).Encode(v)
	} else {
		text()
	}
	return 0
}
