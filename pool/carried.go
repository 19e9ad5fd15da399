package pool

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/pool/inside"
)

// A pause that keeps memory keeps a lease's background processes running in its checkpoint, but
// the node's entries for them (StartProcess) end with the agent connection the checkpoint cuts.
// The pause carries each running one's entry in its manifest's labels (carry), and the resume
// lists them again (adopt): listed, signalled by their marker, ended with the lease, counted
// against MaxRunningProcesses; their output from then on is not followed and their exit code
// not known, so a watch (follow) finds when each is gone.

// labelProcess prefixes the label that carries a process: "proc.ID".
const labelProcess = "proc."

// carried is a running background process as a pause carries it.
type carried struct {
	ID      string    `json:"id"`
	Marker  string    `json:"m"`
	Cmd     []string  `json:"c"`
	Started time.Time `json:"s"`
	Workdir string    `json:"w,omitempty"`
	TTY     bool      `json:"t,omitempty"`
}

// followEvery is how often a resumed lease's carried processes are looked for, and
// maxFollowFailures how many looks in a row may fail before they are followed no more.
const (
	followEvery       = 2 * time.Second
	maxFollowFailures = 30
)

// carry marks lease's running background processes as pausing (their end, when the checkpoint
// cuts the agent, is recorded so) and returns them as labels for the pause's manifest.
func (op *sandboxOps) carry(lease string) map[string]string {
	op.procMu.Lock()
	defer op.procMu.Unlock()
	lp := op.procs[lease]
	if lp == nil {
		return nil
	}
	out := map[string]string{}
	for _, id := range lp.order {
		p := lp.byID[id]
		if p == nil || !p.info.Running {
			continue
		}
		if len(out) == MaxRunningProcesses {
			break
		}
		p.pausing = true
		out[labelProcess+p.info.ID] = fitLabel(carried{ID: p.info.ID, Marker: p.marker, Cmd: slices.Clone(p.info.Cmd),
			Started: p.info.Started, Workdir: p.info.Workdir, TTY: p.info.TTY})
	}
	return out
}

// maxCarriedLabel is the most a carried process's label holds (a manifest's label value holds
// 1 KiB): past it the working folder is dropped, then the command line cut, ending in "…".
const maxCarriedLabel = 1000

// fitLabel is c as a label, cut to fit maxCarriedLabel.
func fitLabel(c carried) string {
	for {
		b, _ := json.Marshal(c)
		if len(b) <= maxCarriedLabel {
			return string(b)
		}
		cut := len(c.Cmd) > 1 && c.Cmd[len(c.Cmd)-1] == "…" // the command was cut already
		switch {
		case c.Workdir != "":
			c.Workdir = ""
		case cut && len(c.Cmd) > 2:
			c.Cmd = append(c.Cmd[:len(c.Cmd)-2], "…")
		case !cut && len(c.Cmd) > 1:
			c.Cmd[len(c.Cmd)-1] = "…"
		default:
			// Its first argument alone is too long: halved, at a rune's start.
			a := c.Cmd[0]
			n := len(a) / 2
			for n > 0 && !utf8.RuneStart(a[n]) {
				n--
			}
			c.Cmd = []string{a[:n], "…"}
		}
	}
}

// uncarry clears what carry marked: lease's processes were not carried after all (the pause
// kept files, or failed and the lease runs on).
func (op *sandboxOps) uncarry(lease string) {
	op.procMu.Lock()
	defer op.procMu.Unlock()
	if lp := op.procs[lease]; lp != nil {
		for _, p := range lp.byID {
			p.pausing = false
		}
	}
}

// carriedOf reads the processes a pause's labels carry; a label that does not read is skipped
// (labels are not signed: the worst one can do is name a marker to look for in the lease's own
// sandbox).
func carriedOf(labels map[string]string) []carried {
	var out []carried
	for k, v := range labels {
		if !strings.HasPrefix(k, labelProcess) {
			continue
		}
		var c carried
		if json.Unmarshal([]byte(v), &c) != nil || c.ID != strings.TrimPrefix(k, labelProcess) || !processID(c.ID) || !hexMarker(c.Marker) || len(c.Cmd) == 0 {
			continue
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	if len(out) > MaxRunningProcesses {
		out = out[:MaxRunningProcesses]
	}
	return out
}

// hexMarker reports whether m has the form of a process marker (16 hex digits), processID
// whether id has a process id's ("p-" and 8).
func hexMarker(m string) bool {
	return len(m) == 16 && strings.Trim(m, "0123456789abcdef") == ""
}

func processID(id string) bool {
	h, ok := strings.CutPrefix(id, "p-")
	return ok && len(h) == 8 && strings.Trim(h, "0123456789abcdef") == ""
}

// adopt lists cs again as l's background processes, l resumed from the pause that carried
// them, and follows whether they run.
func (op *sandboxOps) adopt(l Lease, cs []carried) {
	if len(cs) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mine []*process
	op.procMu.Lock()
	lp := op.procs[l.ID]
	if lp == nil {
		lp = &leaseProcesses{byID: map[string]*process{}}
		op.procs[l.ID] = lp
	}
	running := 0
	for _, q := range lp.byID {
		if q.info.Running {
			running++
		}
	}
	for _, c := range cs {
		if running >= MaxRunningProcesses {
			break
		}
		// An entry of the same id that still runs is followed already; one the pause's cut
		// of the agent ended (a pause that failed, its lease running on) is replaced.
		q := lp.byID[c.ID]
		if q != nil && q.info.Running {
			continue
		}
		p := &process{
			info:   ProcessInfo{ID: c.ID, Cmd: c.Cmd, Started: c.Started, Running: true, Workdir: c.Workdir, TTY: c.TTY, Resumed: true},
			marker: c.Marker, cancel: cancel, stdout: newOutBuf(), stderr: newOutBuf(), done: make(chan struct{}),
		}
		lp.byID[c.ID] = p
		if q == nil {
			lp.order = append(lp.order, c.ID)
		}
		mine = append(mine, p)
		running++
	}
	op.procMu.Unlock()
	if len(mine) == 0 {
		cancel()
		return
	}
	// A lease ended between its bind and this (released as it was resumed) was unbound before
	// its processes were ended: what was listed here for it goes.
	if _, err := op.table.Held(ctx, l.Tenant, l.ID); errors.Is(err, ErrLeaseNotFound) {
		op.procMu.Lock()
		if op.procs[l.ID] == lp {
			delete(op.procs, l.ID)
		}
		op.procMu.Unlock()
		cancel()
		return
	}
	go func() {
		defer cancel()
		op.follow(ctx, l, mine)
	}()
}

// follow looks, every followEvery, for which of ps still run in l's sandbox, and ends the
// entries of those gone; when ctx ends (the lease's end) it ends what it still follows.
func (op *sandboxOps) follow(ctx context.Context, l Lease, ps []*process) {
	t := time.NewTicker(followEvery)
	defer t.Stop()
	failed := 0
	for len(ps) > 0 {
		select {
		case <-ctx.Done():
			for _, p := range ps {
				op.procMu.Lock()
				why := "its lease ended"
				if p.pausing {
					why = "its lease paused; where the pause kept memory it runs on, and is listed again after the resume"
				}
				op.procMu.Unlock()
				op.gone(l, p, why)
			}
			return
		case <-t.C:
		}
		markers := make([]string, len(ps))
		for i, p := range ps {
			markers[i] = p.marker
		}
		var out strings.Builder
		code, err := op.runtime.Exec(ctx, l.Sandbox, ExecRequest{Cmd: inside.AliveCmd(markers), Timeout: 10 * time.Second}, nil,
			&limitWriter{w: &out, n: int64(17 * len(markers))}, io.Discard)
		if err != nil || code != 0 {
			// Asked again at the next tick; a sandbox that stays silent (its lease ended as it
			// was resumed) is followed no more.
			if failed++; failed >= maxFollowFailures {
				for _, p := range ps {
					op.gone(l, p, "its sandbox stopped answering, so it is followed no more")
				}
				return
			}
			continue
		}
		failed = 0
		alive := map[string]bool{}
		for _, m := range strings.Fields(out.String()) {
			alive[m] = true
		}
		kept := ps[:0]
		for _, p := range ps {
			if alive[p.marker] {
				kept = append(kept, p)
				continue
			}
			op.gone(l, p, "it ended after the lease's resume; its exit code is not known")
		}
		ps = kept
	}
}

// gone ends the entry of p, a carried process of l, saying why, and records its end.
func (op *sandboxOps) gone(l Lease, p *process, why string) {
	now := time.Now().UTC()
	op.procMu.Lock()
	p.info.Running, p.info.Ended, p.info.Error = false, &now, why
	op.procMu.Unlock()
	op.processEvent(context.Background(), l, p, EventProcessExit, why)
	close(p.done)
	p.stdout.Write(nil)
	p.stderr.Write(nil)
}
