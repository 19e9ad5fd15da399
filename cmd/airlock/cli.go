package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
)

// isHelp reports whether arg asks for usage.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

// usageOf prints text: to stdout for a request for help (exit 0), to stderr for a usage error
// (exit 2).
func usageOf(text string, usageError bool) int {
	if usageError {
		fmt.Fprint(os.Stderr, text)
		return 2
	}
	fmt.Print(text)
	return 0
}

// parseInterleaved parses fs's flags wherever they stand among the positional arguments (the
// flag package alone stops at the first positional one); "--" ends the flags. It returns the
// positional arguments, or ok false with the exit code: 0 after -h or --help (usage printed to
// stdout), 2 after a bad flag (the error and usage on stderr).
func parseInterleaved(fs *flag.FlagSet, usage string, args []string) (pos []string, code int, ok bool) {
	return parseFlags(fs, usage, args, -1)
}

// parseFlags is parseInterleaved that stops reading flags after the positional argument number
// last (counting from 0; -1: never), so what follows it (a command and its own flags) is taken
// as it is.
func parseFlags(fs *flag.FlagSet, usage string, args []string, last int) (pos []string, code int, ok bool) {
	fs.SetOutput(os.Stderr)
	fs.Usage = func() {}
	var rest []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, rest = args[:i], args[i+1:]
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Print(usage)
				return nil, 0, false
			}
			fmt.Fprint(os.Stderr, usage)
			return nil, 2, false
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, rest...), 0, true
		}
		pos, args = append(pos, args[0]), args[1:]
		if len(pos)-1 == last {
			return append(append(pos, args...), rest...), 0, true
		}
	}
}

// subArgs checks the positional arguments of subcommand sub of cmd against arity (the fewest and
// most each subcommand takes; -1: no most), saying what is wrong on stderr with usage; ok is
// false with exit code 2 when they do not fit.
func subArgs(cmd, sub string, pos []string, arity map[string][2]int, usage string) bool {
	a, known := arity[sub]
	if known && len(pos) >= a[0] && (a[1] < 0 || len(pos) <= a[1]) {
		return true
	}
	if !known {
		fmt.Fprintf(os.Stderr, "airlock %s: unknown subcommand %q\n", cmd, sub)
	}
	fmt.Fprint(os.Stderr, usage)
	return false
}
