package docker

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFromsNamesEveryBase(t *testing.T) {
	df := "# syntax comment\nARG BASE=airlock/python\nARG TAG\nFROM --platform=linux/amd64 ${BASE}:latest AS deps\nRUN x \\\n  y\nFROM deps\nFROM scratch\nFROM $BASE:$TAG\nFROM other:1 as final\nFROM final\n"
	got := froms([]byte(df), map[string]string{"TAG": "v2"})
	var s []string
	for _, f := range got {
		s = append(s, fmt.Sprintf("%s@%d", f.image, f.line))
	}
	if want := []string{"airlock/python:latest@4", "airlock/python:v2@9", "other:1@10"}; !slices.Equal(s, want) {
		t.Errorf("froms = %q, want %q", s, want)
	}
	if got := froms([]byte("FROM ${NOPE}\n"), nil); len(got) != 1 || got[0].image != "" || got[0].line != 1 {
		t.Errorf("an unresolved base: %+v", got)
	}
}

func TestCheckDockerfile(t *testing.T) {
	for df, want := range map[string]string{
		"":                           "no instructions",
		"# only\n\n":                 "no instructions",
		"RUN x\nFROM a\n":            "D:1: the first instruction must be FROM",
		"ARG A=1\n\n  run x\nFROM a": "D:3: the first instruction must be FROM",
		"ARG A=1\nFROM a\n":          "",
	} {
		err := checkDockerfile("D", []byte(df))
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: %v, want %q", df, err, want)
		}
	}
}

// TestTarContextHonoursDockerignore: what .dockerignore leaves out is not sent, ! puts a file
// back, links are sent as links (never followed), and the Dockerfile goes in under its own name.
func TestTarContextHonoursDockerignore(t *testing.T) {
	dir := t.TempDir()
	for p, body := range map[string]string{
		"app/main.py": "x", "secrets/.env": "TOKEN=1", "node_modules/a/b.js": "x", "keep/x.log": "x", "keep/y.log": "x",
		".dockerignore": "secrets\nnode_modules/\n**/*.log\n!keep/y.log\n",
	} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644)
	}
	os.Symlink("/etc/passwd", filepath.Join(dir, "app", "link"))
	var b bytes.Buffer
	if err := tarContext(&b, dir, []byte("FROM a\n")); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(&b)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = string(body) + h.Linkname
	}
	for _, want := range []string{"app/main.py", "keep/y.log", builtDockerfile, "app/link"} {
		if _, ok := got[want]; !ok {
			t.Errorf("the context lacks %s (has %v)", want, got)
		}
	}
	for _, gone := range []string{"secrets/.env", "node_modules/a/b.js", "keep/x.log"} {
		if _, ok := got[gone]; ok {
			t.Errorf("the context holds %s, which .dockerignore leaves out", gone)
		}
	}
	if got["app/link"] != "/etc/passwd" || got[builtDockerfile] != "FROM a\n" {
		t.Errorf("link %q, Dockerfile %q", got["app/link"], got[builtDockerfile])
	}
}

// TestScanTreeReadsTheFilesNotTheTools: the hardening check judges the image's files as the
// tar stream has them, so an image whose own find or sh would lie cannot pass.
func TestScanTreeReadsTheFilesNotTheTools(t *testing.T) {
	tarOf := func(entries ...tar.Header) *bytes.Buffer {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range entries {
			body := ""
			if h.Name == "etc/passwd" {
				body = "root:x:0:0::/root:/bin/sh\nsandbox:x:10001:10001::/workspace:/bin/bash\n"
			}
			h.Size = int64(len(body))
			tw.WriteHeader(&h)
			tw.Write([]byte(body))
		}
		tw.Close()
		return &b
	}
	good := []tar.Header{
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "etc/airlock/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin", Typeflag: tar.TypeSymlink, Linkname: "usr/bin"},
		{Name: "usr/bin/sleep", Typeflag: tar.TypeReg, Mode: 0o755},
		{Name: "usr/bin/bash", Typeflag: tar.TypeReg, Mode: 0o755},
		{Name: "usr/bin/find", Typeflag: tar.TypeReg, Mode: 0o755}, // whatever it would print
		{Name: "var/mail/", Typeflag: tar.TypeDir, Mode: 0o2775},   // a setgid folder is no program
	}
	if p, err := scanTree(tarOf(good...), 10001); err != nil || len(p) != 0 {
		t.Fatalf("a sound tree: %q %v", p, err)
	}
	bad := append(good[:1:1], tar.Header{Name: "./usr/local/bin/su", Typeflag: tar.TypeReg, Mode: 0o4755},
		tar.Header{Name: "usr/bin/wall", Typeflag: tar.TypeReg, Mode: 0o2755})
	p, err := scanTree(tarOf(bad...), 10001)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(p, "\n")
	for _, want := range []string{"user: no account has uid 10001", "mount point: /etc/airlock", "command: sleep is missing", "command: bash is missing",
		"setuid: /usr/bin/wall", "setuid: /usr/local/bin/su"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
}
