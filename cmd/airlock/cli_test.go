package main

import (
	"flag"
	"reflect"
	"testing"
)

func TestParseInterleaved(t *testing.T) {
	for _, c := range []struct {
		args []string
		pos  []string
		r    bool
		code int
		ok   bool
	}{
		{[]string{"l-1", "dir", "-r"}, []string{"l-1", "dir"}, true, 0, true},
		{[]string{"-r", "l-1", "dir"}, []string{"l-1", "dir"}, true, 0, true},
		{[]string{"l-1", "--", "-r", "x"}, []string{"l-1", "-r", "x"}, false, 0, true},
		{[]string{"-r", "--", "a", "-x"}, []string{"a", "-x"}, true, 0, true},
		{[]string{"l-1", "--help"}, nil, false, 0, false},
		{[]string{"l-1", "-nope"}, nil, false, 2, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		r := fs.Bool("r", false, "")
		pos, code, ok := parseInterleaved(fs, "usage\n", c.args)
		if !reflect.DeepEqual(pos, c.pos) || code != c.code || ok != c.ok || (ok && *r != c.r) {
			t.Errorf("%q: pos %q code %d ok %v r %v; want %q %d %v %v", c.args, pos, code, ok, *r, c.pos, c.code, c.ok, c.r)
		}
	}
}

// exec reads its own flags up to the command, and leaves the command's alone.
func TestParseFlagsStopsAtTheCommand(t *testing.T) {
	for _, c := range []struct{ args, pos []string }{
		{[]string{"l-1", "-r", "ls", "-la"}, []string{"l-1", "ls", "-la"}},
		{[]string{"-r", "l-1", "--", "ls", "-r"}, []string{"l-1", "ls", "-r"}},
		{[]string{"l-1", "-r", "--", "sh", "-c", "x"}, []string{"l-1", "sh", "-c", "x"}},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		r := fs.Bool("r", false, "")
		pos, _, ok := parseFlags(fs, "", c.args, 1)
		if !ok || !reflect.DeepEqual(pos, c.pos) || !*r {
			t.Errorf("%q: %q ok %v r %v, want %q", c.args, pos, ok, *r, c.pos)
		}
	}
}
