package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// NodeBinary is the node's binary, installed beside airlock (make build puts both in bin/).
const NodeBinary = "airlock-node"

// Command is one of the node's commands: its usage (the first line is the synopsis the overall
// usage lists) and the subcommands completion offers.
type Command struct {
	Name, Usage string
	Subs        []string
}

// AuditUsage is the usage of airlock audit.
const AuditUsage = `airlock audit verify [--dir DIR] [--key PUB] [--since D|TIME] [--lease ID] [--latest FILE] [--json]
  checks the audit trail with the node's public key only: every record, the chain across
  segments, the signed checkpoints, retention's records, each index against its records and its
  seal in the chain, and the tail against the latest checkpoint kept in Redis (or --latest);
  --since and --lease skip only segments whose sealed index (checked with the key) holds
  nothing asked for; exits 0 when all is intact, 1 when not
`

// NodeCommands are the commands the node binary serves: they drive the local engine, load a
// node's configuration or read its Redis, so the client links none of them. The client lists
// them, answers their --help and completes them as its own, and hands them over (HandOver) to
// run. Callers must not modify the slice.
var NodeCommands = []Command{
	{"up", "airlock up [--config FILE] [--debug]\n  an all-in-one node on the local Docker engine; embedded defaults without --config\n", nil},
	{"audit", AuditUsage, []string{"verify"}},
	{"image", "airlock image build [default|python|node ...]\n  builds the shipped sandbox images locally (debootstrap, docker import)\n", []string{"build"}},
	{"template", "airlock template build [--config FILE] [NAME ...]\n  builds templates from their Dockerfile or devcontainer.json\n", []string{"build"}},
}

// NodeCommand returns the node's command name, or false when it has none.
func NodeCommand(name string) (Command, bool) {
	for _, c := range NodeCommands {
		if c.Name == name {
			return c, true
		}
	}
	return Command{}, false
}

// ErrNoNodeBinary is returned when the node binary is not beside this one.
var ErrNoNodeBinary = errors.New(NodeBinary + " not found")

// FindNodeBinary returns the node binary beside this executable (the one a build or an install
// put there with it; a link to airlock is followed to where it points). It is not looked for
// on PATH: airlock run by its full path (a script, a unit file) must not start whichever
// airlock-node comes first there, with the caller's environment and its API token.
func FindNodeBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("%w: cannot tell where this airlock is: %v", ErrNoNodeBinary, err)
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	p := filepath.Join(filepath.Dir(exe), NodeBinary)
	if !isExecutable(p) {
		return "", fmt.Errorf("%w beside %s: airlock's node commands (up, audit, image, template) run there; install it beside airlock (make build puts it in bin/)", ErrNoNodeBinary, exe)
	}
	return p, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// HandOver replaces this process with the node binary running command name with args, in the
// same environment, so signals, exit codes and standard streams are the node's own, as if the
// user had run it. It returns only when it could not.
func HandOver(name string, args []string) error {
	bin, err := FindNodeBinary()
	if err != nil {
		return err
	}
	err = syscall.Exec(bin, append([]string{bin, name}, args...), os.Environ())
	return fmt.Errorf("running %s: %w", bin, err)
}
