package e2e

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/receipt"
)

// rsyslog is Debian's rsyslogd, run by the test with a configuration of its own: one plain TCP
// and one TLS listener on loopback, every message written to a file with the RFC 5424 fields it
// parsed.
type rsyslog struct {
	dir, conf      string
	plain, tlsPort int
	cmd            *exec.Cmd
}

func startRsyslog(t *testing.T, dir string) *rsyslog {
	t.Helper()
	r := &rsyslog{dir: dir}
	var err error
	if r.plain, err = freePort(); err != nil {
		t.Fatal(err)
	}
	if r.tlsPort, err = freePort(); err != nil {
		t.Fatal(err)
	}
	writeCert(t, dir)
	r.conf = filepath.Join(dir, "rsyslog.conf")
	conf := fmt.Sprintf(`global(workDirectory=%[1]q maxMessageSize="256k"
  DefaultNetstreamDriverCAFile="%[1]s/cert.pem" DefaultNetstreamDriverCertFile="%[1]s/cert.pem" DefaultNetstreamDriverKeyFile="%[1]s/key.pem")
module(load="imtcp" MaxSessions="100")
input(type="imtcp" name="plain" port="%[2]d" address="127.0.0.1")
input(type="imtcp" name="tls" port="%[3]d" address="127.0.0.1" StreamDriver.Name="gtls" StreamDriver.Mode="1" StreamDriver.AuthMode="anon")
template(name="fields" type="string" string="%%inputname%% %%hostname%% %%app-name%% %%msgid%% %%structured-data%% %%msg%%\n")
*.* action(type="omfile" file="%[1]s/received.log" template="fields")
`, dir, r.plain, r.tlsPort)
	if err := os.WriteFile(r.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	r.start(t)
	t.Cleanup(r.stop)
	return r
}

func (r *rsyslog) start(t *testing.T) {
	t.Helper()
	r.cmd = exec.Command("rsyslogd", "-n", "-f", r.conf, "-i", filepath.Join(r.dir, "rsyslog.pid"))
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &syncBuffer{}
	r.cmd.Stdout, r.cmd.Stderr = out, out
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("rsyslogd (scripts/deps.sh installs Debian's rsyslog): %v", err)
	}
	if err := waitUntil(30*time.Second, "rsyslogd to listen", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", r.plain))
		if err == nil {
			c.Close()
		}
		return err == nil
	}); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

func (r *rsyslog) stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Signal(syscall.SIGTERM)
		r.cmd.Wait()
		r.cmd = nil
	}
}

// received returns what rsyslog wrote, by input name.
func (r *rsyslog) received() map[string][]string {
	out := map[string][]string{}
	b, _ := os.ReadFile(filepath.Join(r.dir, "received.log"))
	for _, l := range lines(string(b)) {
		in, rest, _ := strings.Cut(l, " ")
		out[in] = append(out[in], rest)
	}
	return out
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key into dir.
func writeCert(t *testing.T, dir string) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

// collector is the test's own HTTP receiver: it takes NDJSON batches, or answers 503 while down.
type collector struct {
	mu    sync.Mutex
	lines []string
	down  atomic.Bool
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.down.Load() {
		http.Error(w, "receiver down", http.StatusServiceUnavailable)
		return
	}
	if r.Header.Get("Authorization") != "Bearer e2e-token" {
		http.Error(w, "no token", http.StatusUnauthorized)
		return
	}
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(nil, 1<<20)
	c.mu.Lock()
	defer c.mu.Unlock()
	for sc.Scan() {
		c.lines = append(c.lines, sc.Text())
	}
}

func (c *collector) has(sub string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// TestTrailForSecurityTeams: the trail of a real node, written in small segments, is queried on
// the node with filters that combine; a lease's receipt says what it was granted and did and
// verifies offline; airlock audit verify passes on the node's trail (against the checkpoint in
// Redis) and names the tampering done to it after; and every record reaches a real rsyslog over
// TCP and TLS and an HTTP collector, a receiver that is down delaying delivery and never the
// traffic.
func TestTrailForSecurityTeams(t *testing.T) {
	dir := t.TempDir()
	rs := startRsyslog(t, dir)
	col := &collector{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: col}
	go hs.Serve(ln)
	defer hs.Close()
	os.WriteFile(filepath.Join(dir, "token"), []byte("e2e-token\n"), 0o600)
	spec := nodeSpec{Name: "e2etrail", Network: "airlock-e2etrail", Bridge: "airlock-e2et", Subnet: "10.221.0.0/24", MinWarm: 1,
		Extra: fmt.Sprintf(`audit:
  segment_bytes: 65536
  checkpoint_every: 1s
  output_head: 64
  sinks:
    - {name: rsyslog, type: syslog, address: "127.0.0.1:%d"}
    - {name: rsyslog-tls, type: syslog, address: "127.0.0.1:%d", tls: true, ca_file: %q, format: ecs}
    - {name: collector, type: http, url: "http://%s/ingest", token_file: %q, format: ocsf, batch: 50}
`, rs.plain, rs.tlsPort, filepath.Join(dir, "cert.pem"), ln.Addr(), filepath.Join(dir, "token"))}
	cfgPath, err := spec.write(dir, startUpstream(t))
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, spec, dir+"/state", cfgPath)

	a := n.lease(t, "api.example.test=demo")
	if out, errs, c := n.exec(t, a.ID, "curl", "-sS", "https://api.example.test/whoami"); c != 0 {
		t.Fatalf("allowed request: %s %s", out, errs)
	}
	n.exec(t, a.ID, "curl", "-sS", "http://evil.example/")
	n.exec(t, a.ID, "getent", "hosts", "api.example.test")
	if _, errs, c := n.cliStdin(t, strings.NewReader("given"), "cp", "-", a.ID+":given.txt"); c != 0 {
		t.Fatalf("upload: %s", errs)
	}
	n.exec(t, a.ID, "sh", "-c", "echo made > /workspace/made.txt; echo changed > /workspace/given.txt; echo hello-out")
	// Enough refused questions to fill several 64 KiB segments.
	n.exec(t, a.ID, "sh", "-c", "for i in $(seq 400); do getent hosts n$i.nowhere.example >/dev/null; done; true")

	t.Run("filters combine on the node", func(t *testing.T) {
		out, errs, c := n.cli(t, "logs", "--lease", a.ID, "--kind", "http", "--decision", "deny", "--json")
		recs := decodeRecords(t, out)
		if c != 0 || len(recs) == 0 {
			t.Fatalf("logs --kind http --decision deny: exit %d %s", c, errs)
		}
		for _, r := range recs {
			if r.Kind != audit.KindHTTP || r.Decision != audit.Deny || r.Lease != a.ID {
				t.Fatalf("a record the filters exclude: %+v", r)
			}
		}
		out, _, _ = n.cli(t, "logs", "--lease", a.ID, "--host", "API.example.test", "--json")
		for _, r := range decodeRecords(t, out) {
			if r.Host != "api.example.test" && strings.TrimSuffix(r.QName, ".") != "api.example.test" {
				t.Fatalf("--host api.example.test gave %+v", r)
			}
		}
		out, _, _ = n.cli(t, "logs", "--lease", a.ID, "--limit", "3", "--json")
		if got := decodeRecords(t, out); len(got) != 3 {
			t.Fatalf("--limit 3 printed %d records", len(got))
		}
		if m := n.metrics(t); !strings.Contains(m, `airlock_audit_lease_denials_total{lease="`+a.ID+`"`) {
			t.Errorf("no per-lease denial count for %s", a.ID)
		}
	})

	if _, errs, c := n.cli(t, "release", a.ID); c != 0 {
		t.Fatalf("release: %s", errs)
	}

	t.Run("the receipt says what the lease did and verifies offline", func(t *testing.T) {
		signed, errs, c := n.cli(t, "receipt", "--signed", a.ID)
		if c != 0 {
			t.Fatalf("receipt: %s", errs)
		}
		key, err := os.ReadFile(n.client.AuditKey)
		if err != nil {
			t.Fatal(err)
		}
		v, err := audit.NewVerifier(string(key))
		if err != nil {
			t.Fatal(err)
		}
		r, err := receipt.Open([]byte(signed), v)
		if err != nil {
			t.Fatalf("the receipt does not verify: %v\n%s", err, signed)
		}
		t.Logf("receipt: %s", strings.SplitN(signed, "\n", 2)[0])
		if r.Template != "default" || r.EndedBy != "release" || len(r.ScopesGranted) == 0 || len(r.ScopesUsed) != 1 {
			t.Errorf("lease part: %+v", r)
		}
		if !containsDest(r.Destinations, "api.example.test", "demo") || len(r.Credentials) != 1 || r.Credentials[0] != "demo" {
			t.Errorf("destinations %+v credentials %v", r.Destinations, r.Credentials)
		}
		// The lease sent only a GET there: its bytes up are the heads the gateway counted against
		// the budget (the CONNECT's and the request's), the same in the records and the receipt.
		out, _, _ := n.cli(t, "logs", "--lease", a.ID, "--kind", "http", "--host", "api.example.test", "--json")
		var up int64
		for _, rec := range decodeRecords(t, out) {
			up += rec.BytesUp
		}
		for _, d := range r.Destinations {
			if d.Host == "api.example.test" && (d.BytesUp != up || up == 0) {
				t.Errorf("the receipt has %d bytes up to api.example.test, its records %d", d.BytesUp, up)
			}
		}
		if !containsDenial(r.Denials, "evil.example") {
			t.Errorf("denials %+v", r.Denials)
		}
		var ran *receipt.Command
		for i := range r.Commands {
			if strings.Contains(strings.Join(r.Commands[i].Command, " "), "hello-out") {
				ran = &r.Commands[i]
			}
		}
		if ran == nil || ran.Stdout == nil || ran.Stdout.Head != "hello-out\n" || ran.Stdout.Size != 10 || ran.ExitCode == nil || *ran.ExitCode != 0 {
			t.Errorf("the command's entry: %+v", ran)
		}
		changes := map[string]string{}
		for _, f := range r.Files {
			changes[f.Path] = f.Event
		}
		if changes["/workspace/made.txt"] != "workspace-created" || changes["/workspace/given.txt"] != "workspace-modified" {
			t.Errorf("workspace changes %v (summary %q)", changes, r.Workspace)
		}
		path := filepath.Join(dir, "receipt.note")
		os.WriteFile(path, []byte(signed), 0o600)
		if _, errs, c := n.cli(t, "receipt", "--verify", path, "--key", n.client.AuditKey); c != 0 {
			t.Errorf("receipt --verify: %s", errs)
		}
		os.WriteFile(path, []byte(strings.Replace(signed, `"ended_by":"release"`, `"ended_by":"expiry"`, 1)), 0o600)
		if _, _, c := n.cli(t, "receipt", "--verify", path, "--key", n.client.AuditKey); c != 1 {
			t.Errorf("an edited receipt verified (exit %d)", c)
		}
	})

	t.Run("records reach rsyslog over TCP and TLS, and the HTTP collector", func(t *testing.T) {
		if err := waitUntil(60*time.Second, "the lease's records at rsyslog (both listeners) and the collector", func() bool {
			got := rs.received()
			return anyContains(got["plain"], a.ID) && anyContains(got["tls"], a.ID) && col.has(`"class_uid":4002`) && col.has(a.ID)
		}); err != nil {
			got := rs.received()
			t.Fatalf("%v: rsyslog plain %d, tls %d messages, collector %v", err, len(got["plain"]), len(got["tls"]), col.has(a.ID))
		}
		for _, m := range rs.received()["plain"] {
			if strings.Contains(m, a.ID) && !strings.HasPrefix(m, "e2etrail airlock ") {
				t.Fatalf("rsyslog parsed hostname and app-name wrong: %q", m)
			}
		}
	})

	t.Run("a receiver that is down delays delivery, never traffic", func(t *testing.T) {
		rs.stop()
		col.down.Store(true)
		b := n.lease(t, "api.example.test=demo")
		for range 3 {
			if out, errs, c := n.exec(t, b.ID, "curl", "-sS", "https://api.example.test/whoami"); c != 0 {
				t.Fatalf("a request while the receivers are down: %s %s", out, errs)
			}
		}
		rs.start(t)
		col.down.Store(false)
		if err := waitUntil(90*time.Second, "the records made while the receivers were down", func() bool {
			return anyContains(rs.received()["plain"], b.ID) && col.has(b.ID)
		}); err != nil {
			t.Fatalf("%v: rsyslog has them %v, the collector %v", err, anyContains(rs.received()["plain"], b.ID), col.has(b.ID))
		}
		if m := n.metrics(t); !strings.Contains(m, `airlock_audit_ship_failures_total{sink="collector"}`) {
			t.Errorf("no delivery failure counted for the collector")
		}
	})

	t.Run("airlock audit verify passes, then names what was done to the trail", func(t *testing.T) {
		out, errs, c := n.cli(t, "audit", "verify")
		t.Logf("\n%s", out)
		if c != 0 || !strings.Contains(out, "Chain intact from seq 1") || !strings.Contains(out, "Latest checkpoint: Redis") ||
			strings.Contains(out, "INVALID") {
			t.Fatalf("audit verify on the node's trail: exit %d %s\n%s", c, errs, out)
		}
		segs, _ := filepath.Glob(filepath.Join(n.client.Audit, "*.jsonl"))
		if len(segs) < 2 {
			t.Fatalf("the trail has %d segments; 64 KiB segments should have made several", len(segs))
		}
		// The node stops (writing its last checkpoint); then the index of a sealed segment
		// holding the lease is swapped with another's, which a check of that lease (choosing
		// segments by their sealed indexes) names; then one byte of a sealed segment changes.
		keyPath, trailDir := n.client.AuditKey, n.client.Audit
		n.stop(t)
		idx := func(seg string) string { return strings.TrimSuffix(seg, ".jsonl") + ".idx" }
		victim := -1
		for i, seg := range segs[:len(segs)-1] {
			if b, _ := os.ReadFile(seg); victim < 0 && strings.Contains(string(b), `"lease":"`+a.ID+`"`) {
				victim = i
			}
		}
		if victim < 0 || len(segs) < 3 {
			t.Fatalf("no sealed segment holds lease %s, or no other is sealed (%d segments)", a.ID, len(segs))
		}
		orig, err := os.ReadFile(idx(segs[victim]))
		other, err2 := os.ReadFile(idx(segs[(victim+1)%(len(segs)-1)]))
		if err != nil || err2 != nil {
			t.Fatalf("the indexes of the sealed segments: %v %v", err, err2)
		}
		os.WriteFile(idx(segs[victim]), other, 0o600)
		out, _, c = n.cli(t, "audit", "verify", "--dir", trailDir, "--key", keyPath, "--lease", a.ID)
		t.Logf("\n%s", out)
		if c != 1 || !strings.Contains(out, "INVALID: "+filepath.Base(segs[victim])+": tampered index") {
			t.Fatalf("audit verify --lease with a swapped index: exit %d\n%s", c, out)
		}
		os.WriteFile(idx(segs[victim]), orig, 0o600)
		b, _ := os.ReadFile(segs[0])
		i := strings.Index(string(b), `"kind":"lease"`)
		if i < 0 {
			t.Fatalf("no lease record in %s", segs[0])
		}
		b[i+9] = 'X'
		os.WriteFile(segs[0], b, 0o600)
		out, _, c = n.cli(t, "audit", "verify", "--dir", trailDir, "--key", keyPath)
		t.Logf("\n%s", out)
		if c != 1 || !strings.Contains(out, "record fails its own check") || !strings.Contains(out, filepath.Base(segs[0])) {
			t.Fatalf("audit verify after an edit: exit %d\n%s", c, out)
		}
	})
}

func decodeRecords(t *testing.T, out string) []audit.Record {
	var recs []audit.Record
	for _, l := range lines(out) {
		var r audit.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("not a record: %q", l)
		}
		recs = append(recs, r)
	}
	return recs
}

func containsDest(ds []receipt.Destination, host, cred string) bool {
	for _, d := range ds {
		if d.Host == host && d.Allowed > 0 && d.BytesUp > 0 && d.BytesDown > 0 && len(d.Credentials) == 1 && d.Credentials[0] == cred {
			return true
		}
	}
	return false
}

func containsDenial(ds []receipt.Denial, host string) bool {
	for _, d := range ds {
		if d.Host == host && d.Rule == "scope-miss" && d.Count > 0 {
			return true
		}
	}
	return false
}

func anyContains(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
