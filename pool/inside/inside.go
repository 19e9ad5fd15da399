// Package inside is what every sandbox is given and how commands run inside it, whatever the
// backend that runs it (Docker, Kubernetes): the paths of the trust bundle, the environment
// that points clients at the gateway, the marker that finds an exec's processes from inside,
// and the small shell programs a backend runs in the sandbox to signal them, to give them a
// terminal, and to check that the sandbox reaches the gateway and the resolver. A backend
// mounts the files and runs the commands its own way.
package inside

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"software.sslmate.com/src/go-pkcs12"
)

// BundlePath is where the CA bundle is mounted inside every sandbox; it is also mounted over
// the image's own bundle at SystemBundlePath.
const (
	BundlePath       = "/etc/airlock/ca-bundle.pem"
	SystemBundlePath = "/etc/ssl/certs/ca-certificates.crt"
)

// TrustStorePath holds the same roots as a PKCS#12 trust store, for the JVM. Its password only
// satisfies the format (a trust store holds no secret); Java's default is used.
const (
	TrustStorePath     = "/etc/airlock/ca-truststore.p12"
	TrustStorePassword = "changeit"
)

// Marker names the environment variable that marks the processes of one exec, so that they and
// what they start can be found from inside the sandbox (where the host cannot see: gVisor's
// processes are not in the host's /proc, and a Kubernetes node agent sees no container's).
const Marker = "AIRLOCK_EXEC"

// NewMarker returns a fresh marker value.
func NewMarker() string {
	var nonce [8]byte
	rand.Read(nonce[:])
	return hex.EncodeToString(nonce[:])
}

// Env is the environment every sandbox starts with: the gateway as its proxy (and no
// exceptions), the bundle for every client that reads one, and HOME at the workspace.
func Env(proxyURL, home string) []string {
	env := []string{
		"HTTP_PROXY=" + proxyURL, "HTTPS_PROXY=" + proxyURL,
		"http_proxy=" + proxyURL, "https_proxy=" + proxyURL,
		"NO_PROXY=", "no_proxy=",
		"SSL_CERT_FILE=" + BundlePath, "REQUESTS_CA_BUNDLE=" + BundlePath, "CURL_CA_BUNDLE=" + BundlePath,
		"HOME=" + home,
	}
	return append(env, ClientEnv(proxyURL)...)
}

// ClientEnv points the common clients at the gateway's CA and, where a client ignores
// HTTPS_PROXY unless told, tells it: Node's fetch (before v24 it needs NODE_USE_ENV_PROXY), pip,
// the AWS SDKs and CLI, cargo, npm, git, and the JVM (which reads neither the variables nor a
// PEM bundle: it gets proxy properties and a PKCS#12 trust store of the same roots).
func ClientEnv(proxyURL string) []string {
	env := []string{
		"NODE_EXTRA_CA_CERTS=" + BundlePath, "NODE_USE_ENV_PROXY=1",
		"PIP_CERT=" + BundlePath, "AWS_CA_BUNDLE=" + BundlePath, "CARGO_HTTP_CAINFO=" + BundlePath,
		"NPM_CONFIG_CAFILE=" + BundlePath, "GIT_SSL_CAINFO=" + BundlePath,
	}
	java := "-Djavax.net.ssl.trustStore=" + TrustStorePath + " -Djavax.net.ssl.trustStoreType=PKCS12 -Djavax.net.ssl.trustStorePassword=" + TrustStorePassword
	if u, err := url.Parse(proxyURL); err == nil && u.Hostname() != "" {
		for _, scheme := range []string{"http", "https"} {
			java += " -D" + scheme + ".proxyHost=" + u.Hostname() + " -D" + scheme + ".proxyPort=" + u.Port()
		}
	}
	return append(env, "JAVA_TOOL_OPTIONS="+java)
}

// Bundle returns what sandboxes trust: the host's system roots followed by the deployment CA,
// as a PEM bundle and as a PKCS#12 trust store for the JVM.
func Bundle(caPEM []byte) (bundle, trustStore []byte, err error) {
	for _, sys := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"} {
		if s, err := os.ReadFile(sys); err == nil {
			bundle = append(s, '\n')
			break
		}
	}
	bundle = append(bundle, caPEM...)
	var certs []*x509.Certificate
	for rest := bundle; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil && blk.Type == "CERTIFICATE" {
			certs = append(certs, c)
		}
	}
	trustStore, err = pkcs12.Modern.EncodeTrustStore(certs, TrustStorePassword)
	if err != nil {
		return nil, nil, fmt.Errorf("the sandboxes' trust store: %w", err)
	}
	return bundle, trustStore, nil
}

// ResolvConf is the resolver configuration of every sandbox: the node's resolver alone.
func ResolvConf(resolver string) []byte {
	return []byte("nameserver " + resolver + "\noptions ndots:0 attempts:1 timeout:2\n")
}

// AliveCmd prints each of markers (hex, as markers are) that a process of the sandbox still
// carries in its environment, one per line (what SignalCmd would reach): one grep over every
// process's environment.
func AliveCmd(markers []string) []string {
	sweep := `IFS='|'; grep -ohzxE "` + Marker + `=($*)" /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | sed 's/^` + Marker + `=//' | sort -u; exit 0`
	return append([]string{"sh", "-c", sweep, "alive"}, markers...)
}

// SignalCmd sends sig, as the sandbox user, to every process whose environment carries marker:
// the only way to signal a background process and what it started. A process that cleared its
// environment is left to the lease's end and its pids limit.
func SignalCmd(marker, sig string) []string {
	sweep := `for p in /proc/[0-9]*; do n=${p#/proc/}; [ "$n" = $$ ] && continue; ` +
		`grep -qxz "` + Marker + `=$0" "$p/environ" 2>/dev/null && kill -s "$1" "$n" 2>/dev/null; done; exit 0`
	return []string{"sh", "-c", sweep, marker, sig}
}

// OnTerminal wraps cmd to run on a pseudo-terminal of size made inside the sandbox, with
// util-linux's script: an engine's own terminals are not terminals to a program under gVisor
// (its standard streams are host files there), while a terminal the sandbox's kernel makes is
// one under every runtime. script returns the command's exit code; the terminal's output,
// stderr included, comes on stdout.
func OnTerminal(cmd []string, rows, cols uint16) []string {
	if rows == 0 || cols == 0 {
		rows, cols = 24, 80
	}
	line := fmt.Sprintf("stty rows %d cols %d 2>/dev/null; exec", rows, cols)
	for _, a := range cmd {
		line += " " + Quote(a)
	}
	return []string{"sh", "-c", `command -v script >/dev/null || { echo "airlock: a terminal needs util-linux's script in the sandbox image" >&2; exit 125; }; ` +
		`exec script -qefc "$0" /dev/null`, line}
}

// Quote quotes s for a POSIX shell.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ResizeNoTerminal is ResizeCmd's exit code when it found no terminal of the exec to resize.
const ResizeNoTerminal = 3

// ResizeCmd sets the size of the terminal that the exec with marker runs on (OnTerminal's): the
// one its processes have as their input. It exits ResizeNoTerminal when no process of the exec
// has a terminal yet (a resize sent as the command starts), for the caller to try again.
func ResizeCmd(marker string, rows, cols uint16) []string {
	sweep := `for p in /proc/[0-9]*; do grep -qxz "` + Marker + `=$0" "$p/environ" 2>/dev/null || continue; ` +
		`t=$(readlink "$p/fd/0") || continue; case $t in /dev/pts/*) stty -F "$t" rows "$1" cols "$2"; exit;; esac; done; ` +
		`exit ` + strconv.Itoa(ResizeNoTerminal)
	return []string{"sh", "-c", sweep, marker, strconv.Itoa(int(rows)), strconv.Itoa(int(cols))}
}

// ProbeCmd is the health probe every warm sandbox passes before a lease gets it: it does not
// run as root, whatever the image or template said, and it opens TCP connections to the
// gateway (proxyURL's host and port) and to the resolver (which serves TCP too) from the
// sandbox's own namespace. It needs bash in the image.
func ProbeCmd(proxyURL, resolver string) ([]string, error) {
	u, err := url.Parse(proxyURL)
	if err != nil || u.Port() == "" {
		return nil, fmt.Errorf("the gateway's address %q has no host and port", proxyURL)
	}
	probe := fmt.Sprintf(`[ "$(id -u)" != 0 ] && [ "$(id -g)" != 0 ] || { echo "runs as root" >&2; exit 1; }; `+
		"exec 3<>/dev/tcp/%s/%s && exec 4<>/dev/tcp/%s/53", u.Hostname(), u.Port(), resolver)
	return []string{"bash", "-c", probe}, nil
}
