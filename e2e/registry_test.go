package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// The package registries the workload installs from, served by the test's upstream under
// names of its own: a PyPI-style simple index and file host (mirror.internal.test, which the
// gateway sends pypi.org and files.pythonhosted.org to) and an npm registry
// (npm.internal.test). Each serves one package with a command in it.
const (
	mirrorHost = "mirror.internal.test"
	npmHost    = "npm.internal.test"
	wheelName  = "hello_airlock-1.0-py3-none-any.whl"
	npmTarball = "hello-bin-1.0.0.tgz"
)

// registry holds the packages, built once, and what was asked of it.
type registry struct {
	wheel, tgz []byte
	mu         sync.Mutex
	asked      []string // "HOST PATH" of every request
}

func newRegistry() *registry {
	return &registry{wheel: buildWheel(), tgz: buildNpmPackage()}
}

func (g *registry) requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.asked...)
}

// routes adds the registry's pages to mux.
func (g *registry) routes(mux *http.ServeMux) {
	note := func(r *http.Request) {
		g.mu.Lock()
		g.asked = append(g.asked, r.Host+" "+r.URL.Path)
		g.mu.Unlock()
	}
	// PEP 503: the project page links to its files, with the hash pip checks. The link names
	// the public file host, as the real index does; the gateway sends it to the mirror too.
	mux.HandleFunc("GET /simple/hello-airlock/", func(w http.ResponseWriter, r *http.Request) {
		note(r)
		sum := sha256.Sum256(g.wheel)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"https://files.pythonhosted.org/packages/%s#sha256=%s\">%s</a></body></html>\n",
			wheelName, hex.EncodeToString(sum[:]), wheelName)
	})
	mux.HandleFunc("GET /packages/"+wheelName, func(w http.ResponseWriter, r *http.Request) {
		note(r)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(g.wheel)
	})
	mux.HandleFunc("GET /hello-bin", func(w http.ResponseWriter, r *http.Request) {
		note(r)
		sha1sum := sha1.Sum(g.tgz)
		sha512sum := sha512.Sum512(g.tgz)
		doc := map[string]any{
			"name":      "hello-bin",
			"dist-tags": map[string]string{"latest": "1.0.0"},
			"versions": map[string]any{"1.0.0": map[string]any{
				"name": "hello-bin", "version": "1.0.0", "bin": map[string]string{"hello-bin": "bin/hello.js"},
				"dist": map[string]string{
					"tarball":   "https://" + npmHost + "/hello-bin/-/" + npmTarball,
					"shasum":    hex.EncodeToString(sha1sum[:]),
					"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:]),
				},
			}},
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(doc)
	})
	mux.HandleFunc("GET /hello-bin/-/"+npmTarball, func(w http.ResponseWriter, r *http.Request) {
		note(r)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(g.tgz)
	})
}

// buildWheel is a wheel (PEP 427) of hello-airlock 1.0 with a console script, hello-airlock.
func buildWheel() []byte {
	files := []struct{ name, body string }{
		{"hello_airlock/__init__.py", "def main():\n    print(\"hello from a console script\")\n\n\ndef add(a, b):\n    return a + b\n"},
		{"hello_airlock-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: hello-airlock\nVersion: 1.0\n"},
		{"hello_airlock-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: airlock-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{"hello_airlock-1.0.dist-info/entry_points.txt", "[console_scripts]\nhello-airlock = hello_airlock:main\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, _ := zw.Create(f.name)
		w.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString("hello_airlock-1.0.dist-info/RECORD,,\n")
	w, _ := zw.Create("hello_airlock-1.0.dist-info/RECORD")
	w.Write([]byte(record.String()))
	zw.Close()
	return buf.Bytes()
}

// buildNpmPackage is the tarball of hello-bin 1.0.0, whose bin prints a line.
func buildNpmPackage() []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name, body string
		mode       int64
	}{
		{"package/package.json", `{"name": "hello-bin", "version": "1.0.0", "bin": {"hello-bin": "bin/hello.js"}}` + "\n", 0o644},
		{"package/bin/hello.js", "#!/usr/bin/env node\nconsole.log('hello from node_modules/.bin, node ' + process.version);\n", 0o755},
	} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(f.body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}
