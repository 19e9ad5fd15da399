// Command statebench measures the state that travels (make bench-state): snapshots of a
// workspace and leases restored from them against the workspace's size, pause and resume per
// runtime and what a pause keeps (under runsc both on a template that keeps files and on one
// with snapshot.memory, whose pauses keep running processes), one snapshot forked into several
// leases at once, and each stage of a snapshot and a restore timed alone. For each runtime it runs a whole node in this
// process with the dev stack (Redis, a Vault dev server with its transit engine), snapshots in
// the default directory store on this machine's disk, and real sandboxes on the local engine;
// everything goes through the HTTP API as a backend's calls would.
//
// Every wait is bounded and names what it waited for; the node's warnings go to stderr. The
// node removes its sandboxes and network when it stops, at the end or at SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/benchcmd"
	"github.com/airlock-dev/airlock/pool"
)

func main() {
	var p plan
	runtimes := flag.String("runtimes", "", "OCI runtimes to measure, comma-separated (default: runc, and runsc when the engine has it)")
	sizes := flag.String("sizes", "1,100,1000", "workspace sizes to snapshot and restore, MiB, comma-separated")
	flag.IntVar(&p.Rounds, "rounds", 5, "rounds of each snapshot and restore, and of each pause and resume")
	pauseSizes := flag.String("pause-sizes", "1,100", "workspace sizes to pause and resume, MiB")
	flag.IntVar(&p.Fork, "fork", 8, "leases asked for at once from one snapshot")
	forkSizes := flag.String("fork-sizes", "1,100", "workspace sizes to fork, MiB")
	flag.IntVar(&p.ForkRounds, "fork-rounds", 3, "rounds of each fork")
	phases := flag.String("phases", strings.Join(allPhases, ","), "what to measure, comma-separated: snapshot (and restore), pause (and resume), fork, "+
		"parts (each stage of a snapshot and a restore of the largest -sizes alone)")
	flag.BoolVar(&p.Memory, "memory", true, "under runsc, also pause and resume on a template with snapshot.memory, whose pauses keep running processes")
	flag.StringVar(&p.Vault, "vault", "bin/vault", "the Vault binary the dev stack runs (make vault)")
	flag.StringVar(&p.Profile, "cpuprofile", "", "write a CPU profile of this process (the node) over each runtime's snapshot and restore rounds to PREFIX-RUNTIME.pprof")
	flag.Parse()
	var err error
	if p.Sizes, err = mibList("-sizes", *sizes); err == nil {
		if p.PauseSizes, err = mibList("-pause-sizes", *pauseSizes); err == nil {
			p.ForkSizes, err = mibList("-fork-sizes", *forkSizes)
		}
	}
	if err == nil {
		p.Phases, err = phaseList(*phases)
	}
	if err != nil {
		log.Fatal(err)
	}
	if p.Rounds < 1 || p.ForkRounds < 1 || p.Fork < 1 {
		log.Fatal("-rounds, -fork-rounds and -fork must be at least 1")
	}
	p.Runtimes = []string{"runc"}
	if engineHas("runsc") {
		p.Runtimes = append(p.Runtimes, "runsc")
	}
	if *runtimes != "" {
		p.Runtimes = strings.Split(*runtimes, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := p.run(ctx); err != nil {
		stop()
		log.Fatal(err)
	}
}

// plan is what a run measures and how much of it.
type plan struct {
	Runtimes                     []string
	Phases                       map[string]bool
	Sizes, PauseSizes, ForkSizes []int
	Rounds, ForkRounds, Fork     int
	// Memory adds, on a runsc node, a template with snapshot.memory to pause and resume.
	Memory         bool
	Vault, Profile string
}

// The phases a run may measure, in the order it measures them.
const (
	phaseSnapshot = "snapshot"
	phasePause    = "pause"
	phaseFork     = "fork"
	phaseParts    = "parts"
)

var allPhases = []string{phaseSnapshot, phasePause, phaseFork, phaseParts}

// results are what a run measured, printed as tables at its end.
type results struct {
	sizes  []sizeResult
	pauses []pauseResult
	forks  []forkResult
	parts  []partsResult
}

// run measures each runtime in turn, on a node of its own, then prints the tables.
func (p plan) run(ctx context.Context) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The big template is sized for every size asked for, measured in this run or not, so that
	// a run of some phases has the sandboxes a run of all of them has.
	np := nodePlan{BigMiB: slices.Max(slices.Concat(p.Sizes, p.PauseSizes)), ForkMiB: slices.Max(p.ForkSizes), Fork: p.Fork, Vault: p.Vault,
		ForkTemplate: p.Phases[phaseFork], MemoryTemplate: p.Memory && p.Phases[phasePause]}
	loadBefore := loadavg()
	var res results
	for _, rt := range p.Runtimes {
		if err := p.runtime(ctx, rt, np, log, &res); err != nil {
			return fmt.Errorf("%s: %w", rt, err)
		}
	}
	p.print(res, loadBefore, loadavg())
	return nil
}

// runtime measures rt on a node of its own, which it stops before it returns.
func (p plan) runtime(ctx context.Context, rt string, np nodePlan, log *slog.Logger, res *results) error {
	fmt.Fprintf(os.Stderr, "statebench: starting a %s node\n", rt)
	n, err := startNode(ctx, rt, np, log)
	if err != nil {
		return err
	}
	defer n.stop()
	prefix := ""
	if p.Profile != "" {
		prefix = p.Profile + "-" + rt + ".pprof"
	}
	stopProfile, err := benchcmd.Profile(prefix)
	if err != nil {
		return err
	}
	for _, size := range p.Sizes {
		if !p.Phases[phaseSnapshot] {
			break
		}
		fmt.Fprintf(os.Stderr, "statebench: %s: snapshot and restore of %d MiB, %d rounds\n", rt, size, p.Rounds)
		r, err := n.snapshotRestore(ctx, size, p.Rounds)
		if err != nil {
			stopProfile()
			return err
		}
		res.sizes = append(res.sizes, r)
	}
	stopProfile()
	// Files first, then memory (a template with snapshot.memory), each from the smallest size.
	for _, t := range []*pool.Template{&n.big, n.mem} {
		for _, size := range p.PauseSizes {
			if !p.Phases[phasePause] || t == nil {
				break
			}
			fmt.Fprintf(os.Stderr, "statebench: %s: pause and resume of %d MiB on template %s (snapshot.memory %v), %d rounds\n",
				rt, size, t.Name, t.Snapshot.Memory, p.Rounds)
			r, err := n.pauseResume(ctx, *t, size, p.Rounds)
			if err != nil {
				return err
			}
			res.pauses = append(res.pauses, r)
		}
	}
	for _, size := range p.ForkSizes {
		if !p.Phases[phaseFork] {
			break
		}
		fmt.Fprintf(os.Stderr, "statebench: %s: fork of %d MiB into %d leases, %d rounds\n", rt, size, p.Fork, p.ForkRounds)
		r, err := n.forkAtOnce(ctx, size, p.Fork, p.ForkRounds)
		if err != nil {
			return err
		}
		res.forks = append(res.forks, r)
	}
	if p.Phases[phaseParts] {
		size := slices.Max(p.Sizes)
		fmt.Fprintf(os.Stderr, "statebench: %s: the stages of %d MiB alone\n", rt, size)
		r, err := n.parts(ctx, size)
		if err != nil {
			return err
		}
		res.parts = append(res.parts, r)
	}
	return nil
}

// print prints the tables of res, those of the phases measured.
func (p plan) print(res results, loadBefore, loadAfter string) {
	fmt.Printf("%d cores (GOMAXPROCS %d); load average before: %s; after: %s.\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), loadBefore, loadAfter)
	forks := ""
	if p.Phases[phaseFork] {
		forks = fmt.Sprintf(" (%d for forks)", p.ForkRounds)
	}
	fmt.Printf("Medians (p50) and p90 by nearest rank over %d rounds%s: over 5 rounds the p90 is the slowest.\n", p.Rounds, forks)

	if len(res.sizes) > 0 {
		fmt.Println()
		fmt.Println("Snapshot of a running lease's workspace (POST /v1/leases/{id}/snapshots), as the client waits for it;")
		fmt.Println("again: a second snapshot of the same, unchanged workspace (the store holds its blob already); release: the")
		fmt.Println("snapshotted lease's release, which reads and hashes its workspace for the lease's ledger before it destroys the sandbox:")
		fmt.Println()
		fmt.Println("| runtime | workspace MiB | entries | archive MiB | stored MiB | snapshot p50 ms | p90 | MiB/s at p50 | node's took_ms p50 | again p50 ms | p90 | release p50 ms | p90 |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
		for _, r := range res.sizes {
			content, _ := workspaceShape(r.sizeMiB)
			fmt.Printf("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.rt, r.sizeMiB, r.files, mib(r.archive), mib(r.stored),
				r.snapshot.p50(), r.snapshot.p90(), rate(content, r.snapshot.q(0.5)), r.snapshotTook.p50(), r.again.p50(), r.again.p90(),
				r.release.p50(), r.release.p90())
		}

		fmt.Println()
		fmt.Println("Lease from a snapshot (POST /v1/leases {\"from\"}), returned once the workspace is restored; restore is the")
		fmt.Println("part the answer reports as restored.took_ms (open, decrypt, verify, filter, tar -x in the sandbox):")
		fmt.Println()
		fmt.Println("| runtime | workspace MiB | lease p50 ms | p90 | restore p50 ms | p90 | MiB/s at p50 | lease less restore p50 ms | warm sandboxes |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|")
		for _, r := range res.sizes {
			content, _ := workspaceShape(r.sizeMiB)
			fmt.Printf("| %s | %d | %s | %s | %s | %s | %s | %s | %d of %d |\n", r.rt, r.sizeMiB, r.lease.p50(), r.lease.p90(), r.restore.p50(), r.restore.p90(),
				rate(content, r.restore.q(0.5)), msText(max(r.lease.q(0.5)-r.restore.q(0.5), time.Microsecond)), r.warm, len(r.lease))
		}
	}

	if len(res.pauses) > 0 {
		fmt.Println()
		fmt.Println("Pause (POST /v1/leases/{id}/pause {\"memory\": true}) of a lease running a background process, and resume with a")
		fmt.Println("fresh task token for the lease's task (POST /v1/leases/{id}/resume); memory: the template's snapshot.memory; kept:")
		fmt.Println("what the pause answered it kept; process back: the resumes after which the process started before the pause still")
		fmt.Println("ran, the same one (its pid and a number it drew, kept in /tmp, which only memory keeps); restore: the resume's")
		fmt.Println("restored.took_ms; kept MiB: the pause's archive (the workspace's files, or the checkpoint's), stored MiB: what")
		fmt.Println("the store holds of it (encrypted):")
		fmt.Println()
		fmt.Println("| runtime | memory | workspace MiB | kept | process back | pause p50 ms | p90 | node's took_ms p50 | resume p50 ms | p90 | restore p50 ms | kept MiB | stored MiB |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
		type whyKey struct {
			rt     string
			memory bool
		}
		whys := map[whyKey]string{}
		var order []whyKey
		for _, r := range res.pauses {
			fmt.Printf("| %s | %s | %d | %s | %d of %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.rt, yesNo(r.memory), r.sizeMiB, r.kept, r.back, len(r.resume),
				r.pause.p50(), r.pause.p90(), r.pauseTook.p50(), r.resume.p50(), r.resume.p90(), r.restore.p50(), mib(r.size), mib(r.stored))
			k := whyKey{r.rt, r.memory}
			if _, seen := whys[k]; !seen {
				order = append(order, k)
			}
			if r.why != "" {
				whys[k] = r.why
			}
		}
		for _, k := range order {
			if why := whys[k]; why != "" {
				fmt.Printf("\nWhy memory was not kept under %s on the template %s snapshot.memory, as the pause answered: %s\n", k.rt,
					map[bool]string{true: "with", false: "without"}[k.memory], why)
			}
		}
	}

	if len(res.forks) > 0 {
		fmt.Println()
		fmt.Printf("Fork: %d leases from one snapshot asked for at once, each its own token, binding and sandbox:\n\n", p.Fork)
		fmt.Println("| runtime | workspace MiB | leases | all returned p50 ms | p90 | each lease p50 ms | p90 | restore p50 ms | p90 | warm sandboxes |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
		for _, r := range res.forks {
			fmt.Printf("| %s | %d | %d x %d | %s | %s | %s | %s | %s | %s | %d of %d |\n", r.rt, r.sizeMiB, len(r.all), r.k, r.all.p50(), r.all.p90(),
				r.each.p50(), r.each.p90(), r.restore.p50(), r.restore.p90(), r.warm, r.leases)
		}
	}

	for _, r := range res.parts {
		fmt.Printf("\nUnder %s, each stage of a snapshot and a restore of %d MiB timed alone: a snapshot streams tar, the exec stream,\n", r.rt, r.sizeMiB)
		fmt.Println("the filter, SHA-256 and the seal at once, into the staging file, then Puts it; a restore streams the store's file, the")
		fmt.Println("open, the filter and tar -x at once. The streams and tar once each; the stages in this process (filter to Put, the")
		fmt.Printf("catalog's Save and Open) the median of %d:\n", stageRuns)
		fmt.Println()
		fmt.Println("| stage | MiB | ms | MiB/s |")
		fmt.Println("|---|---|---|---|")
		for _, s := range r.parts {
			fmt.Printf("| %s | %s | %s | %s |\n", s.name, mib(s.bytes), msText(s.took), rate(s.bytes, s.took))
		}
		fmt.Printf("| Vault transit: a data key (transit/datakey/plaintext), %d calls | | p50 %s, p90 %s | |\n", len(r.dataKey), r.dataKey.p50(), r.dataKey.p90())
		fmt.Printf("| Vault transit: an unwrap (transit/decrypt), %d calls | | p50 %s, p90 %s | |\n", len(r.unwrap), r.unwrap.p50(), r.unwrap.p90())
	}
}

// yesNo is b for the tables.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// phaseList parses -phases.
func phaseList(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allPhases, f) {
			return nil, fmt.Errorf("-phases: %q is not one of %s", f, strings.Join(allPhases, ", "))
		}
		out[f] = true
	}
	return out, nil
}

// mibList parses a comma-separated list of sizes in MiB.
func mibList(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%s: %q is not a size in MiB", flag, f)
		}
		out = append(out, v)
	}
	return out, nil
}

// engineHas reports whether the local engine lists the OCI runtime name.
func engineHas(name string) bool {
	out, err := exec.Command("docker", "info", "--format", "{{range $k, $v := .Runtimes}}{{$k}} {{end}}").Output()
	return err == nil && slices.Contains(strings.Fields(string(out)), name)
}

// loadavg is the machine's load average over 1, 5 and 15 minutes, as /proc/loadavg says.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}
