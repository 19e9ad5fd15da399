package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/audit"
)

// A recorded path, name or reason cannot forge lines, move the cursor or reorder text on the
// reviewer's terminal: everything a terminal would act on comes out escaped.
func TestLogsTextEscapesTerminalControls(t *testing.T) {
	forged := "/x\r\n12:00:00.000 http  allow scope l-1 GET trusted.example:443/ok\x1b[2K\x1b]0;t\x07\u202eevil\u2066\x9b31m\xff\\"
	var out bytes.Buffer
	printRecord(&out, audit.Record{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss\x1b[0m", Lease: "l-1",
		Method: "GET", Host: "a.example", Port: 443, Path: forged, Reason: "no scope for " + forged})
	s := out.String()
	if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Fatalf("one record printed as %d lines: %q", strings.Count(s, "\n"), s)
	}
	for _, bad := range []string{"\r", "\x1b", "\x07", "\u202e", "\u2066", "\u009b"} {
		if strings.Contains(s, bad) {
			t.Errorf("output holds %q: %q", bad, s)
		}
	}
	if !utf8.ValidString(s) {
		t.Errorf("output is not valid UTF-8: %q", s)
	}
	for _, want := range []string{`\r\n`, `\x1b[2K`, `\u202e`, `\xff`, `\\`} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks the escape %s: %q", want, s)
		}
	}
	if got := terminalSafe("plain text, é and 漢字"); got != "plain text, é and 漢字" {
		t.Errorf("printable text was changed: %q", got)
	}
}
