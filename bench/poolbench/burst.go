package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/node"
	"github.com/airlock-dev/airlock/pool"
)

// burstRun is one airlock build run as `airlock up` on its embedded defaults (what `make up`
// runs), driven by bursts of clients through its HTTP API.
type burstRun struct {
	Name   string // how the tables call this build: "before", "after"
	Binary string
}

// burstPlan is what each build is put through.
type burstPlan struct {
	Levels []int         // concurrent clients, one level after another
	For    time.Duration // how long each level loops
	Gap    time.Duration // the pause between levels
	Trace  int           // the level whose pool target is printed second by second
	Idle   time.Duration // how long to wait, after the last level, for the pool to shrink to its floor
}

// burstLevel is what one level of clients got.
type burstLevel struct {
	clients  int
	cycles   int
	took     time.Duration
	lease    []time.Duration // leases that were granted
	release  []time.Duration // releases that answered
	starts   map[string]int  // warm, waited, cold
	refused  int             // leases refused (no sandbox, or max_total)
	failed   []error         // anything else that went wrong: an exec or a release
	warmAt   int             // the template's warm sandboxes as the level began
	trace    []pool.PoolStatus
	traceAge []time.Duration
}

// burstBench runs plan against each build in turn, on the local engine, and prints the table of
// every level, the pool's target second by second through plan.Trace, and the time an idle pool
// took to shrink back to its floor.
func burstBench(ctx context.Context, runs []burstRun, plan burstPlan) error {
	fmt.Printf("Bursts on `airlock up`'s embedded defaults (the `default` template; %s per level, %s between levels).\n", plan.For, plan.Gap)
	fmt.Println("Each client loops: lease, run `true` through the API, release. A refused lease is counted and tried again after 250 ms.")
	fmt.Println()
	type result struct {
		name   string
		levels []burstLevel
		floor  string
	}
	var results []result
	for _, r := range runs {
		levels, floor, err := burstOne(ctx, r, plan)
		if err != nil {
			return fmt.Errorf("%s (%s): %w", r.Name, r.Binary, err)
		}
		results = append(results, result{r.Name, levels, floor})
	}
	fmt.Println("| build | clients | cycles | cycles/s | lease p50 ms | lease p99 ms | release p50 ms | release p99 ms | warm | waited | cold | refused | other failures | warm at start |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, res := range results {
		for _, l := range res.levels {
			granted := len(l.lease)
			share := func(kind string) string {
				if granted == 0 {
					return "-"
				}
				return fmt.Sprintf("%.0f %%", 100*float64(l.starts[kind])/float64(granted))
			}
			fmt.Printf("| %s | %d | %d | %.2f | %.1f | %.1f | %.1f | %.1f | %s | %s | %s | %d | %d | %d |\n", res.name, l.clients, l.cycles,
				float64(l.cycles)/l.took.Seconds(), ms(pct(l.lease, 0.5)), ms(pct(l.lease, 0.99)), ms(pct(l.release, 0.5)), ms(pct(l.release, 0.99)),
				share("warm"), share("waited"), share("cold"), l.refused, len(l.failed), l.warmAt)
		}
	}
	fmt.Println()
	for _, res := range results {
		fmt.Printf("%s: an idle pool back to its floor: %s\n", res.name, res.floor)
	}
	for _, res := range results {
		for _, l := range res.levels {
			if l.clients != plan.Trace || len(l.trace) == 0 || l.trace[0].MaxWarm == 0 {
				continue // a build that reports no target has no trace to show
			}
			fmt.Printf("\n%s, %d clients: the `default` pool second by second (the API's pool status):\n\n", res.name, l.clients)
			fmt.Println("| s | target | warm | creating | waiting | leased | lease rate /s | create s |")
			fmt.Println("|---|---|---|---|---|---|---|---|")
			for i, p := range l.trace {
				fmt.Printf("| %.0f | %d | %d | %d | %d | %d | %.2f | %.2f |\n", l.traceAge[i].Seconds(), p.Target, p.Warm, p.Creating, p.Waiting, p.Leased, p.LeaseRate, p.CreateSeconds)
			}
		}
	}
	for _, res := range results {
		for _, l := range res.levels {
			if len(l.failed) > 0 {
				return fmt.Errorf("%s at %d clients: %d cycles failed other than by a refused lease: %w", res.name, l.clients, len(l.failed), errors.Join(l.failed[:min(3, len(l.failed))]...))
			}
		}
	}
	fmt.Println()
	return nil
}

// burstOne starts r as `airlock up` in a state directory of its own, waits for its pools to be
// warm, runs every level of plan and then waits for the idle pool to shrink to its floor.
func burstOne(ctx context.Context, r burstRun, plan burstPlan) ([]burstLevel, string, error) {
	dir, err := os.MkdirTemp("", "poolbench-burst")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	logf, err := os.Create(filepath.Join(dir, "up.log"))
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()
	cmd := exec.Command(r.Binary, "up")
	cmd.Env = append(os.Environ(), "AIRLOCK_STATE_DIR="+dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		// airlock up removes its sandboxes, network and child processes on SIGINT.
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}()
	tail := func() string {
		b, _ := os.ReadFile(logf.Name())
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		return strings.Join(lines[max(0, len(lines)-8):], "\n")
	}
	var cf node.ClientFile
	var c *client.Client
	var last string
	err = wait.Until(5*time.Minute, "airlock up to write its client file and warm every pool", func() bool {
		select {
		case err := <-exited:
			exited <- err
			last = fmt.Sprintf("airlock up exited (%v)", err)
			return true
		default:
		}
		if c == nil {
			if cf, err = node.ReadClientFile(dir); err != nil {
				last = "no client file yet"
				return false
			}
			c = &client.Client{Addr: cf.Addr, Token: cf.Token}
		}
		ok, why := floor(ctx, c, false)
		last = why
		return ok
	})
	if err == nil && c == nil {
		err = errors.New(last)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w (last seen: %s); its log ends:\n%s", err, last, tail())
	}
	var levels []burstLevel
	for i, n := range plan.Levels {
		if i > 0 {
			time.Sleep(plan.Gap)
		}
		l, err := burstLevelRun(ctx, c, n, plan.For, n == plan.Trace)
		if err != nil {
			return nil, "", err
		}
		levels = append(levels, l)
	}
	start := time.Now()
	err = wait.Until(plan.Idle, "the idle pools to shrink back to their floor", func() bool {
		ok, why := floor(ctx, c, true)
		last = why
		return ok
	})
	idle := fmt.Sprintf("%.0f s", time.Since(start).Seconds())
	if err != nil {
		idle = fmt.Sprintf("not within %s (last seen: %s)", plan.Idle, last)
	}
	return levels, idle, nil
}

// floor reports whether every pool holds at least its min_warm sandboxes and, with atMost,
// no more than that (and a target, where the build reports one, back at min_warm); else what
// it saw.
func floor(ctx context.Context, c *client.Client, atMost bool) (bool, string) {
	ps, err := c.Pools(ctx)
	if err != nil {
		return false, "the API answered: " + err.Error()
	}
	var seen []string
	ok := true
	for _, p := range ps {
		seen = append(seen, fmt.Sprintf("%s %d warm (min %d, target %d, creating %d)", p.Template, p.Warm, p.MinWarm, p.Target, p.Creating))
		if p.Warm < p.MinWarm || atMost && (p.Warm > p.MinWarm || p.Creating > 0 || p.MaxWarm > 0 && p.Target > p.MinWarm) {
			ok = false
		}
	}
	return ok, strings.Join(seen, ", ")
}

// burstLevelRun runs n clients looping lease, `true`, release on the default template for d,
// and samples the pool's status every second when trace is set.
func burstLevelRun(ctx context.Context, c *client.Client, n int, d time.Duration, trace bool) (burstLevel, error) {
	l := burstLevel{clients: n, starts: map[string]int{}}
	if ps, err := c.Pools(ctx); err == nil {
		for _, p := range ps {
			if p.Template == "default" {
				l.warmAt = p.Warm
			}
		}
	}
	var mu sync.Mutex
	start := time.Now()
	stop := start.Add(d)
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		if !trace {
			return
		}
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ps, err := c.Pools(pctx)
			cancel()
			if err == nil {
				for _, p := range ps {
					if p.Template == "default" {
						mu.Lock()
						l.trace, l.traceAge = append(l.trace, p), append(l.traceAge, time.Since(start))
						mu.Unlock()
					}
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				// Every call is bounded: a node that stops answering fails the run, naming the
				// call, instead of holding it.
				cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				s := time.Now()
				lv, err := c.Lease(cctx, api.LeaseRequest{Template: "default", Allow: []string{}})
				took := time.Since(s)
				if err != nil {
					var ae *client.Error
					mu.Lock()
					if errors.As(err, &ae) && ae.Status == 503 {
						l.refused++
					} else {
						l.failed = append(l.failed, fmt.Errorf("lease: %w", err))
					}
					mu.Unlock()
					cancel()
					time.Sleep(250 * time.Millisecond)
					continue
				}
				code, xerr := c.Exec(cctx, lv.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard)
				rs := time.Now()
				rerr := c.Release(cctx, lv.ID)
				released := time.Since(rs)
				cancel()
				mu.Lock()
				l.lease = append(l.lease, took)
				if rerr == nil {
					l.release = append(l.release, released)
				}
				l.starts[string(lv.Start)]++
				switch {
				case xerr != nil:
					l.failed = append(l.failed, fmt.Errorf("exec in %s: %w", lv.ID, xerr))
				case code != 0:
					l.failed = append(l.failed, fmt.Errorf("exec in %s: `true` exited %d", lv.ID, code))
				case rerr != nil:
					l.failed = append(l.failed, fmt.Errorf("release %s: %w", lv.ID, rerr))
				default:
					l.cycles++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	l.took = time.Since(start)
	close(done)
	<-sampled
	return l, ctx.Err()
}
