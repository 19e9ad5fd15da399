// Command airlock runs an airlock node (`airlock up`) and talks to one (lease, exec, release).
package main

import (
	"fmt"
	"os"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `airlock: secret-free sandboxes for AI coding agents, with one guarded way out

usage:
  airlock up [--config FILE]      all-in-one node on the local Docker engine
  airlock lease --template T (--token JWT | --allow HOST[:PORT][=CREDENTIAL] ...) [--ttl D] [--json]
  airlock exec LEASE [-i] [--timeout D] -- CMD ARGS...
  airlock cp SRC DST              one side LEASE:PATH (in the workspace); '-' is stdin/stdout
  airlock fs ls|stat|mkdir|rm|mv LEASE PATH ...   list, describe, make, remove and move in the workspace
  airlock proc start|ls|output|kill|wait LEASE ...  background processes that outlive the call
  airlock renew LEASE [--ttl D]
  airlock release LEASE
  airlock logs [--lease ID] [--decision allow|deny] [--since D] [--follow] [--json]
  airlock explain (--token JWT | --lease LEASE) [--method M] [--json] URL
  airlock port LEASE PORT         a URL (on its own listener) that reaches that port of the sandbox
  airlock verify [--template T] [--token JWT]   leases a sandbox and checks the invariants from inside
  airlock image build [default|python|node ...]   builds the shipped sandbox images locally (debootstrap, docker import)
  airlock template build [--config FILE] [NAME ...]   builds templates from their Dockerfile or devcontainer.json
  airlock mcp [--http ADDR] [--any-key] [--keep]   an MCP server for agents, on stdio or streamable HTTP
  airlock pools [--json]
  airlock version

Client commands find a local 'airlock up' through its state dir, or use AIRLOCK_ADDR and AIRLOCK_TOKEN.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmds := map[string]func([]string) int{
		"up": cmdUp, "lease": cmdLease, "exec": cmdExec, "release": cmdRelease, "pools": cmdPools,
		"explain": cmdExplain, "cp": cmdCp, "renew": cmdRenew, "logs": cmdLogs, "verify": cmdVerify,
		"port": cmdPort, "fs": cmdFs, "proc": cmdProc, "mcp": cmdMCP, "image": cmdImage, "template": cmdTemplate,
		"version": func([]string) int { fmt.Println("airlock", version); return 0 },
	}
	run, ok := cmds[os.Args[1]]
	if !ok {
		if os.Args[1] != "-h" && os.Args[1] != "--help" && os.Args[1] != "help" {
			fmt.Fprintf(os.Stderr, "airlock: unknown command %q\n\n", os.Args[1])
		}
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	os.Exit(run(os.Args[2:]))
}

// fail prints err the same way for every command and returns the exit code for airlock's own
// errors (125, so it is told apart from a command's exit code in exec).
func fail(err error) int {
	fmt.Fprintln(os.Stderr, "airlock:", err)
	return 125
}
