// Package benchcmd holds what the benchmark harnesses share: running one of their modes, and CPU
// profiles of the part under test.
package benchcmd

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
)

// Main runs the mode named by the first argument with the arguments after it, until it returns
// or SIGINT or SIGTERM ends its context; an error stops the process with the error.
func Main(name string, modes map[string]func(ctx context.Context, args []string) error) {
	names := make([]string, 0, len(modes))
	for m := range modes {
		names = append(names, m)
	}
	slices.Sort(names)
	if len(os.Args) < 2 {
		log.Fatalf("usage: %s %s ...", name, strings.Join(names, "|"))
	}
	run, ok := modes[os.Args[1]]
	if !ok {
		log.Fatalf("%s: unknown mode %q (want %s)", name, os.Args[1], strings.Join(names, ", "))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[2:]); err != nil {
		log.Fatal(err)
	}
}

// Profile writes a CPU profile to path until the returned stop is called; an empty path profiles
// nothing.
func Profile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
