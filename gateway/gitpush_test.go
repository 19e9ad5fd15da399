package gateway

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func pktLine(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

const (
	oidA = "1111111111111111111111111111111111111111"
	oidB = "2222222222222222222222222222222222222222"
	oid0 = "0000000000000000000000000000000000000000"
)

func pushRequest(body string, encoding string) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "https://git.example/acme/app.git/git-receive-pack", strings.NewReader(body))
	if encoding != "" {
		r.Header.Set("Content-Encoding", encoding)
	}
	return r
}

// The commands are read as receive-pack reads them, and every byte of the body goes on.
func TestReadPushCommands(t *testing.T) {
	body := pktLine("shallow "+oidA+"\n") + pktLine(oidA+" "+oidB+" refs/heads/agent/x\x00report-status side-band-64k agent=git/2\n") +
		pktLine(oid0+" "+oidB+" refs/heads/agent/new\n") + pktLine(oidA+" "+oid0+" refs/heads/old\n") + "0000" + "PACK\x00\x00\x00\x02rest of the pack"
	r := pushRequest(body, "")
	cmds, caps, err := readPushCommands(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 3 || cmds[0].ref != "refs/heads/agent/x" || cmds[1].what() != "create" || cmds[2].what() != "delete" ||
		!caps["report-status"] || !caps["side-band-64k"] || !caps["agent"] {
		t.Fatalf("commands %+v, caps %v", cmds, caps)
	}
	if got, _ := io.ReadAll(r.Body); string(got) != body {
		t.Fatalf("the body sent on differs from the body received:\n%q\n%q", got, body)
	}
	// A gzip body is read through, and sent on as it came.
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(body))
	zw.Close()
	r = pushRequest(z.String(), "gzip")
	if cmds, _, err := readPushCommands(r); err != nil || len(cmds) != 3 {
		t.Fatalf("gzip: %v %+v", err, cmds)
	}
	if got, _ := io.ReadAll(r.Body); !bytes.Equal(got, z.Bytes()) {
		t.Fatal("a gzip body was not sent on byte for byte")
	}
}

// Anything the upstream could read as other commands than the ones checked is refused.
func TestReadPushCommandsRefuses(t *testing.T) {
	cmd := func(s string) string { return pktLine(s + "\n") }
	for name, body := range map[string]string{
		"no flush":             cmd(oidA + " " + oidB + " refs/heads/x"),
		"no command":           "0000",
		"a bad length":         "zzzz" + cmd(oidA+" "+oidB+" refs/heads/x") + "0000",
		"a delim packet":       "0001" + "0000",
		"an empty packet":      "0004" + "0000",
		"extra space":          cmd(oidA+" "+oidB+"  refs/heads/x") + "0000",
		"a ref with a space":   cmd(oidA+" "+oidB+" refs/heads/x y") + "0000",
		"a ref with dots":      cmd(oidA+" "+oidB+" refs/heads/../main") + "0000",
		"not under refs":       cmd(oidA+" "+oidB+" HEAD") + "0000",
		"a short id":           cmd("1111 "+oidB+" refs/heads/x") + "0000",
		"ids of two lengths":   cmd(oidA+" "+oidB+"22222222222222222222222222 refs/heads/x") + "0000",
		"upper-case ids":       cmd(strings.ToUpper("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")+" "+oidB+" refs/heads/x") + "0000",
		"a signed push":        cmd("push-cert\x00report-status") + "0000",
		"a cut packet":         "00ff" + oidA,
		"a NUL in a later ref": cmd(oidA+" "+oidB+" refs/heads/x") + cmd(oidA+" "+oidB+" refs/heads/y\x00caps") + "0000",
		"a lock ref":           cmd(oidA+" "+oidB+" refs/heads/x.lock") + "0000",
		"a reflog ref":         cmd(oidA+" "+oidB+" refs/heads/x@{1}") + "0000",
	} {
		if _, _, err := readPushCommands(pushRequest(body, "")); err == nil {
			t.Errorf("%s: read as commands", name)
		}
	}
	if _, _, err := readPushCommands(pushRequest(cmd(oidA+" "+oidB+" refs/heads/x")+"0000", "br")); err == nil ||
		!strings.Contains(err.Error(), "br") {
		t.Errorf("a body in an encoding the gateway cannot read: %v", err)
	}
	many := strings.Repeat(cmd(oidA+" "+oidB+" refs/heads/x"), maxGitCommands+1) + "0000"
	if _, _, err := readPushCommands(pushRequest(many, "")); err == nil {
		t.Error("more ref updates than the bound were read")
	}
}

// Whatever a sandbox sends, reading the commands never panics, and the body goes on unchanged.
func FuzzReadPushCommands(f *testing.F) {
	f.Add(pktLine(oidA+" "+oidB+" refs/heads/x\x00report-status\n") + "0000PACK")
	f.Add("0000")
	f.Fuzz(func(t *testing.T, body string) {
		r := pushRequest(body, "")
		readPushCommands(r)
		if got, _ := io.ReadAll(r.Body); string(got) != body {
			t.Fatalf("the body sent on differs")
		}
	})
}
