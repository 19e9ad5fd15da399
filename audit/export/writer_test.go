package export

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// Each format writes one line per record (CSV: under one header), in the schema asked for.
func TestWriterFormats(t *testing.T) {
	r := audit.Record{Kind: audit.KindDNS, Decision: audit.Deny, Rule: "scope-miss", Lease: "l-1", QName: "x.example", QType: "A"}
	for format, want := range map[string]string{"ocsf": `"class_uid":4003`, "ecs": `"dataset":"airlock.dns"`, "json": `"qname":"x.example"`,
		"csv": "x.example,A"} {
		var out bytes.Buffer
		w, err := NewWriter(&out, format)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(r)
		w.Write(r)
		w.Flush()
		lines := 2
		if format == "csv" {
			lines = 3
		}
		if s := out.String(); strings.Count(s, "\n") != lines || !strings.Contains(s, want) {
			t.Errorf("format %s: %q, want %d lines holding %s", format, s, lines, want)
		}
	}
	if _, err := NewWriter(&bytes.Buffer{}, "xml"); err == nil || !strings.Contains(err.Error(), "csv") {
		t.Errorf("an unknown format is refused naming the known ones: %v", err)
	}
}

// A path or name a sandbox chose cannot become a spreadsheet formula in a CSV export, and a
// comma, quote or newline in it cannot make a column or a row of its own.
func TestCSVCellsAreInert(t *testing.T) {
	var out bytes.Buffer
	w, _ := NewWriter(&out, "csv")
	code := -1
	w.Write(audit.Record{Seq: 7, Kind: audit.KindHTTP, Method: "GET", Host: "a.example", Path: "=HYPERLINK(\"http://x\",\"y\")",
		Reason: "+cmd|' /C calc'!A0,\"\nforged,row", ExitCode: &code})
	w.Flush()
	rows, err := csv.NewReader(&out).ReadAll()
	if err != nil || len(rows) != 2 {
		t.Fatalf("%d rows (%v): %q", len(rows), err, out.String())
	}
	col := map[string]string{}
	for i, name := range CSVColumns {
		col[name] = rows[1][i]
	}
	if !strings.HasPrefix(col["path"], "'=") || !strings.HasPrefix(col["reason"], "'+") || col["exit_code"] != "-1" || col["seq"] != "7" {
		t.Errorf("cells: path %q, reason %q, exit_code %q", col["path"], col["reason"], col["exit_code"])
	}
}
