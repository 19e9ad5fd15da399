// Command airlock-agent is the sandbox's exec agent on its own: a small static binary the node
// mounts into every sandbox instead of itself when it finds one beside its executable (see
// package agent). Run with AIRLOCK_EXEC_AGENT=1 it serves the node on its standard streams;
// the package's init does all of it.
package main

import (
	"fmt"
	"os"

	"github.com/airlock-dev/airlock/pool/docker/agent"
)

func main() {
	fmt.Fprintf(os.Stderr, "airlock-agent runs inside a sandbox, started by the node with %s=1 on its standard streams\n", agent.Env)
	os.Exit(2)
}
