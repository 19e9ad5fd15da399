package export

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// Formats records are written in, one per line: airlock's own records (as the API answers
// them), OCSF events, ECS documents, or CSV rows under a header.
var Formats = []string{"json", "ocsf", "ecs", "csv"}

// Writer writes records in one format. `airlock logs --format F` and the review page's export
// both write through it, so the same filter gives the same bytes from either.
type Writer struct {
	format string
	enc    *json.Encoder
	csv    *csv.Writer
	header bool
}

// NewWriter returns a writer of format (one of Formats) to w.
func NewWriter(w io.Writer, format string) (*Writer, error) {
	switch format {
	case "json", "ocsf", "ecs":
		return &Writer{format: format, enc: json.NewEncoder(w)}, nil
	case "csv":
		return &Writer{format: format, csv: csv.NewWriter(w)}, nil
	}
	return nil, fmt.Errorf("format %q is not %s", format, strings.Join(Formats, ", "))
}

// CSVColumns are the columns of a CSV export, in order.
var CSVColumns = []string{"seq", "time", "node", "tenant", "lease", "task", "kind", "event", "decision", "rule", "reason",
	"method", "host", "port", "path", "status", "credential", "bytes_up", "bytes_down", "qname", "qtype", "flagged",
	"command", "exit_code", "file_path", "size", "sha256", "reviewer", "hash"}

// Write writes one record.
func (w *Writer) Write(r audit.Record) error {
	switch w.format {
	case "json":
		return w.enc.Encode(r)
	case "ocsf":
		return w.enc.Encode(OCSF(r))
	case "ecs":
		return w.enc.Encode(ECS(r))
	}
	if !w.header {
		w.header = true
		if err := w.csv.Write(CSVColumns); err != nil {
			return err
		}
	}
	num := func(n int64) string {
		if n == 0 {
			return ""
		}
		return strconv.FormatInt(n, 10)
	}
	exit := ""
	if r.ExitCode != nil {
		exit = strconv.Itoa(*r.ExitCode)
	}
	flagged := ""
	if r.Flagged {
		flagged = "true"
	}
	host, path, file := r.Host, r.Path, ""
	if r.Kind == audit.KindFile || r.Kind == audit.KindExec {
		path, file = "", r.Path
	}
	t := inertCell
	row := []string{strconv.FormatUint(r.Seq, 10), r.Time.UTC().Format(time.RFC3339Nano), t(r.Node), t(r.Tenant), t(r.Lease),
		t(r.Task), string(r.Kind), t(string(r.Event)), string(r.Decision), t(r.Rule.String()), t(r.Reason), t(r.Method), t(host),
		num(int64(r.Port)), t(path), num(int64(r.Status)), t(r.Credential), num(r.BytesUp), num(r.BytesDown), t(r.QName),
		t(r.QType), flagged, t(strings.Join(r.Command, " ")), exit, t(file), num(r.Size), t(r.SHA256), t(r.Reviewer), r.Hash}
	return w.csv.Write(row)
}

// Flush writes what is buffered (CSV buffers; the JSON formats write each line as it comes).
func (w *Writer) Flush() error {
	if w.csv == nil {
		return nil
	}
	if !w.header {
		w.header = true
		w.csv.Write(CSVColumns)
	}
	w.csv.Flush()
	return w.csv.Error()
}

// inertCell keeps a value a sandbox chose from being read as a formula by a spreadsheet that
// opens the export: a cell beginning with =, +, -, @, a tab or a carriage return gets a leading
// apostrophe, which spreadsheets show as text and drop.
func inertCell(v string) string {
	if v != "" && strings.ContainsRune("=+-@\t\r", rune(v[0])) {
		return "'" + v
	}
	return v
}
