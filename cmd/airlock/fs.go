package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/airlock-dev/airlock/api/apitype"
)

const fsUsage = `usage: airlock fs ls|stat|mkdir|rm|mv LEASE PATH ...
  airlock fs ls LEASE [PATH] [--depth N] [--json]   list a folder of the workspace (default: the workspace)
  airlock fs stat LEASE PATH [--json]
  airlock fs mkdir LEASE PATH                       with its parents
  airlock fs rm LEASE PATH [-r]                     a file, symlink or empty folder; -r any folder
  airlock fs mv LEASE FROM TO [--force]             within the workspace; --force replaces TO
`

// cmdFs lists, describes, makes, removes and moves files in a lease's workspace.
func cmdFs(args []string) int {
	if len(args) == 0 || isHelp(args[0]) {
		return usageOf(fsUsage, len(args) == 0)
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("fs "+sub, flag.ContinueOnError)
	depth := fs.Int("depth", 1, "ls: levels to list")
	asJSON := fs.Bool("json", false, "print JSON")
	recursive := fs.Bool("r", false, "rm: a folder and all it holds")
	force := fs.Bool("force", false, "mv: replace what TO names")
	pos, code, ok := parseInterleaved(fs, fsUsage, args)
	if !ok {
		return code
	}
	if !subArgs("fs", sub, pos, map[string][2]int{"ls": {1, 2}, "stat": {2, 2}, "mkdir": {2, 2}, "rm": {2, 2}, "mv": {3, 3}}, fsUsage) {
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	lease := pos[0]
	switch sub {
	case "ls":
		p := ""
		if len(pos) > 1 {
			p = pos[1]
		}
		v, err := c.ListFiles(ctx, lease, p, *depth)
		if err != nil {
			return fail(err)
		}
		return emit(*asJSON, v, func() {
			for _, e := range v.Entries {
				printEntry(e)
			}
			if v.Truncated {
				fmt.Fprintf(os.Stderr, "airlock: the listing stops at %d entries\n", apitype.MaxListEntries)
			}
		})
	case "stat":
		e, err := c.Stat(ctx, lease, pos[1])
		if err != nil {
			return fail(err)
		}
		return emit(*asJSON, e, func() { printEntry(e) })
	case "mkdir":
		err = c.Mkdir(ctx, lease, pos[1])
	case "rm":
		err = c.Remove(ctx, lease, pos[1], *recursive)
	case "mv":
		err = c.Move(ctx, lease, pos[1], pos[2], *force)
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

func printEntry(e apitype.Entry) {
	kind := map[string]string{"file": "-", "dir": "d", "symlink": "l"}[e.Type]
	if kind == "" {
		kind = "?"
	}
	name := e.Path
	if e.Link != "" {
		name += " -> " + e.Link
	}
	fmt.Printf("%s %s %10d %s %s\n", kind, e.Mode, e.Size, e.MTime.Local().Format("2006-01-02 15:04:05"), name)
}
