// Command airlock-node runs an airlock node and the commands that drive a node's own parts:
// `up`, `audit verify`, `image build` and `template build`. Users run them as `airlock up` and
// so on: the client (cmd/airlock), which links no server, hands them over to this binary,
// installed beside it.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/airlock-dev/airlock/cmd/internal/cli"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

// runners run each of cli.NodeCommands.
var runners = map[string]func([]string) int{
	"up":       cmdUp,
	"audit":    cmdAudit,
	"image":    cmdImage,
	"template": cmdTemplate,
}

func usage() string {
	var b strings.Builder
	b.WriteString("airlock-node: an airlock node and its own commands; run them as `airlock COMMAND`\n\nusage:\n")
	for _, c := range cli.NodeCommands {
		first, _, _ := strings.Cut(c.Usage, "\n")
		b.WriteString("  " + first + "\n")
	}
	b.WriteString("\nairlock COMMAND --help describes one; airlock help lists the client's commands too.\n")
	return b.String()
}

func main() { os.Exit(dispatch(os.Args[1:])) }

func dispatch(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage())
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Print(usage())
		return 0
	case "--version", "-version", "version":
		fmt.Println("airlock-node", version)
		return 0
	}
	c, ok := cli.NodeCommand(args[0])
	run := runners[args[0]]
	if !ok || run == nil {
		fmt.Fprintf(os.Stderr, "airlock-node: unknown command %q\n\n%s", args[0], usage())
		return 2
	}
	if len(args) > 1 && (args[1] == "-h" || args[1] == "--help" || args[1] == "-help") {
		fmt.Print("usage: " + c.Usage)
		return 0
	}
	return run(args[1:])
}

// fail prints err as every airlock command does and returns 1, the exit code of a command that
// failed.
func fail(err error) int {
	fmt.Fprintln(os.Stderr, "airlock:", err)
	return 1
}
