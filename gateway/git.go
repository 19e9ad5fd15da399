package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// Bounds of what the gateway reads of a push before the pack: the ref-update commands.
const (
	maxGitCommandBytes = 1 << 20
	maxGitCommands     = 10000
)

// gitCommand is one ref update of a push.
type gitCommand struct {
	old, new, ref string
}

func (c gitCommand) what() string {
	switch {
	case strings.Trim(c.new, "0") == "":
		return "delete"
	case strings.Trim(c.old, "0") == "":
		return "create"
	}
	return "update"
}

// checkGit applies a git scope to a request: only git's smart HTTP to the scope's repositories,
// and for a push, only updates of the refs it allows. The commands are read from the start of
// the body (before the pack) and put back, so what is sent upstream is byte for byte what came;
// a push with any refused ref is refused whole and never sent, so no ref of it changes.
func checkGit(r *http.Request, x *exchange) error {
	g := x.scope.Git
	repo, service, ok := scope.GitRequest(r.Method, x.path, r.URL.RawQuery)
	if !ok {
		return refuse(http.StatusForbidden, rule.Git,
			fmt.Sprintf("scope %s allows only git's smart HTTP to %s; %s %s is not a fetch or a push of one",
				x.scope, strings.Join(g.Repos, ", "), r.Method, x.path),
			"a git scope covers clones, fetches and pushes of its repos; another scope for the rest of the host")
	}
	if !g.AllowsRepo(repo) {
		return refuse(http.StatusForbidden, rule.Git,
			fmt.Sprintf("scope %s does not cover repository %s (it covers %s)", x.scope, repo, strings.Join(g.Repos, ", ")),
			"a task token whose git scope lists the repository")
	}
	if service != scope.GitReceivePack || r.Method != http.MethodPost {
		x.note = fmt.Sprintf("git %s %s", strings.TrimPrefix(service, "git-"), repo)
		return nil
	}
	cmds, caps, err := readPushCommands(r)
	if err != nil {
		return refuse(http.StatusBadRequest, rule.Git, fmt.Sprintf("push to %s: %v", repo, err), "")
	}
	var refused []string
	why := map[string]string{}
	for _, c := range cmds {
		switch {
		case c.what() == "delete" && !g.Delete:
			why[c.ref] = "deleting refs is not allowed"
		case !g.AllowsRef(c.ref):
			why[c.ref] = "outside " + strings.Join(g.Push, ", ")
			if len(g.Push) == 0 {
				why[c.ref] = "the scope allows no pushes"
			}
		default:
			continue
		}
		refused = append(refused, c.ref)
	}
	var done []string
	for i, c := range cmds {
		if i == 20 {
			done = append(done, fmt.Sprintf("and %d more", len(cmds)-i)) // the record stays a line
			break
		}
		done = append(done, c.ref+" ("+c.what()+")")
	}
	if len(refused) == 0 {
		x.note = fmt.Sprintf("git push %s: %s", repo, strings.Join(done, ", "))
		return nil
	}
	reason := fmt.Sprintf("push to %s refused whole: %s %s", repo, refused[0], why[refused[0]])
	if len(refused) > 1 {
		reason += fmt.Sprintf(" (and %d more refs refused)", len(refused)-1)
	}
	ref := refuse(http.StatusForbidden, rule.Git, reason, "a task token whose git scope's push patterns cover the ref")
	if caps["report-status"] || caps["report-status-v2"] {
		// git shows a report's reasons per ref; a bare 403 would show only the status.
		ref.Status, ref.respond = http.StatusOK, func(w http.ResponseWriter) {
			writePushReport(w, cmds, why, refused[0], caps["side-band-64k"] || caps["side-band"])
		}
	}
	return ref
}

// readPushCommands reads a push's ref-update commands (after any shallow lines, up to the flush
// that ends them) from the request body, and puts every byte read back in front of the rest.
// Anything but a well-formed command list is an error: the upstream must read exactly the
// commands checked here.
func readPushCommands(r *http.Request) ([]gitCommand, map[string]bool, error) {
	var seen bytes.Buffer
	var src io.Reader = io.TeeReader(r.Body, &seen)
	defer func() { r.Body = readCloser{io.MultiReader(&seen, r.Body), r.Body} }()
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, nil, fmt.Errorf("the gzip body does not open: %v", err)
		}
		// One member only: the commands must end inside the first, whether the server reads
		// the members after it or not.
		zr.Multistream(false)
		src = zr
	default:
		return nil, nil, fmt.Errorf("content encoding %q cannot be read for its ref updates", enc)
	}
	br := bufio.NewReader(io.LimitReader(src, maxGitCommandBytes))
	var cmds []gitCommand
	caps := map[string]bool{}
	for {
		line, flush, err := readPktLine(br)
		if err != nil {
			return nil, nil, err
		}
		if flush {
			break
		}
		line = strings.TrimSuffix(line, "\n")
		if len(cmds) == 0 {
			if oid, ok := strings.CutPrefix(line, "shallow "); ok && validOID(oid) {
				continue
			}
			if strings.HasPrefix(line, "push-cert") {
				return nil, nil, errors.New("signed pushes (push-cert) are not read; push unsigned")
			}
			var c string
			line, c, _ = strings.Cut(line, "\x00")
			for _, k := range strings.Fields(c) {
				k, _, _ = strings.Cut(k, "=")
				caps[k] = true
			}
		}
		c, err := parseCommand(line)
		if err != nil {
			return nil, nil, err
		}
		if cmds = append(cmds, c); len(cmds) > maxGitCommands {
			return nil, nil, fmt.Errorf("more than %d ref updates in one push", maxGitCommands)
		}
	}
	if len(cmds) == 0 {
		return nil, nil, errors.New("no ref update before the pack")
	}
	return cmds, caps, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// readPktLine reads one pkt-line: its text, or flush for "0000". The other special lengths
// (0001 to 0004) have no place in a command list.
func readPktLine(br *bufio.Reader) (string, bool, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return "", false, fmt.Errorf("the ref updates end early (%v)", err)
	}
	n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
	switch {
	case err != nil:
		return "", false, fmt.Errorf("a pkt-line length %q is not hex", hdr[:])
	case n == 0:
		return "", true, nil
	case n <= 4:
		return "", false, fmt.Errorf("a pkt-line of length %d in the ref updates", n)
	}
	b := make([]byte, n-4)
	if _, err := io.ReadFull(br, b); err != nil {
		return "", false, fmt.Errorf("a pkt-line is cut short (%v)", err)
	}
	return string(b), false, nil
}

// parseCommand reads "<old> <new> <ref>", refusing anything git's receive-pack would read
// differently or refuse itself.
func parseCommand(line string) (gitCommand, error) {
	parts := strings.Split(line, " ")
	if len(parts) != 3 || !validOID(parts[0]) || !validOID(parts[1]) || len(parts[0]) != len(parts[1]) {
		return gitCommand{}, fmt.Errorf("%q is not a ref update (old-id new-id ref)", line)
	}
	if !validRef(parts[2]) {
		return gitCommand{}, fmt.Errorf("%q is not a valid ref name", parts[2])
	}
	return gitCommand{old: parts[0], new: parts[1], ref: parts[2]}, nil
}

func validOID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// validRef is git's check-ref-format for a full ref name under refs/.
func validRef(ref string) bool {
	if !strings.HasPrefix(ref, "refs/") || len(ref) > 1024 || strings.HasSuffix(ref, "/") || strings.HasSuffix(ref, ".") ||
		strings.Contains(ref, "..") || strings.Contains(ref, "//") || strings.Contains(ref, "@{") || ref == "@" {
		return false
	}
	for _, seg := range strings.Split(ref, "/") {
		if seg == "" || strings.HasPrefix(seg, ".") || strings.HasSuffix(seg, ".lock") {
			return false
		}
	}
	for i := 0; i < len(ref); i++ {
		c := ref[i]
		if c < 0x20 || c == 0x7f || strings.IndexByte(" ~^:?*[\\", c) >= 0 {
			return false
		}
	}
	return true
}

// writePushReport answers a refused push as receive-pack would: "unpack ok", then "ng" for
// every ref (the refused ones with their reason, the others because the push is refused whole),
// in the side band when the client asked for one, with a message git prints as "remote:".
func writePushReport(w http.ResponseWriter, cmds []gitCommand, why map[string]string, first string, sideband bool) {
	var report bytes.Buffer
	pkt := func(b *bytes.Buffer, s string) { fmt.Fprintf(b, "%04x%s", len(s)+4, s) }
	pkt(&report, "unpack ok\n")
	for _, c := range cmds {
		reason := why[c.ref]
		if reason == "" {
			reason = "not updated: the push is refused whole (" + first + " is not allowed)"
		}
		pkt(&report, "ng "+c.ref+" airlock: "+reason+"\n")
	}
	report.WriteString("0000")
	w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if !sideband {
		w.Write(report.Bytes())
		return
	}
	var out bytes.Buffer
	pkt(&out, "\x02airlock: push refused, no ref was updated: "+first+" "+why[first]+"\n")
	for b := report.Bytes(); len(b) > 0; {
		n := min(len(b), 65515)
		pkt(&out, "\x01"+string(b[:n]))
		b = b[n:]
	}
	out.WriteString("0000")
	w.Write(out.Bytes())
}
