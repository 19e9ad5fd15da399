// Command poolbench measures the warm lease path (make bench-pool): the HTTP API, task token
// verification, the atomic claim and the binding write and announcement in a real Redis, with
// the binding visible to the node's cache before the lease returns. The lease path makes no
// Docker call by design, so the sandboxes here are registered in Redis by a runtime that starts
// nothing; cold start and memory per sandbox are measured against the real engine by
// scripts/bench-pool.sh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/docker"
	"github.com/airlock-dev/airlock/scope"
)

func main() {
	leases := flag.Int("n", 400, "leases per concurrency level")
	cold := flag.Int("cold", 0, "also start this many real sandboxes on the local Docker engine, for cold start and memory")
	images := flag.String("images", "airlock/default:latest,airlock/python:latest,airlock/node:latest", "sandbox images for -cold, comma-separated: one measurement each, under runc")
	gvisor := flag.String("gvisor", "airlock/default:latest", "also measure this image under runsc, when the engine has it (empty: no)")
	crun := flag.String("crun", "airlock/default:latest", "with -cold: also measure this image under crun, when the engine has it (empty: no)")
	var nr nodeRun
	whole := flag.Bool("node", false, "also run a whole node with real warm sandboxes under each runtime: leases, first exec, the gateway's latency from inside")
	flag.IntVar(&nr.Rounds, "rounds", 3, "with -node: rounds of leases per concurrency level")
	flag.IntVar(&nr.Warm, "warm", 10, "with -node: warm sandboxes per runtime, leased in each round")
	flag.StringVar(&nr.Vault, "vault", "bin/vault", "with -node: the Vault binary (make vault)")
	flag.IntVar(&nr.Requests, "requests", 50, "with -node: requests per connection mode for the gateway's latency")
	burst := flag.String("burst", "", "run bursts against these airlock builds under `airlock up`, each name=binary, comma-separated (then nothing else runs)")
	var plan burstPlan
	levels := flag.String("burst-levels", "1,8,16,32", "with -burst: concurrent clients of each level")
	flag.DurationVar(&plan.For, "burst-for", time.Minute, "with -burst: how long each level loops")
	flag.DurationVar(&plan.Gap, "burst-gap", 10*time.Second, "with -burst: the pause between levels")
	flag.IntVar(&plan.Trace, "burst-trace", 16, "with -burst: the level whose pool target is printed second by second")
	flag.DurationVar(&plan.Idle, "burst-idle", 10*time.Minute, "with -burst: how long to wait for an idle pool to shrink to its floor")
	kube := flag.String("kube", "", "also measure on the Kubernetes backend against the cluster of this env file (make kube's): cold Pod starts and memory with -cold, a whole node with -node")
	engine := flag.String("engine", "", "measure the engine's sandbox throughput at these numbers at once, comma-separated (then nothing else runs)")
	engineN := flag.Int("engine-n", 40, "with -engine: sandboxes per level")
	engineRts := flag.String("engine-runtimes", "runc", "with -engine: the runtimes to measure, one after another, comma-separated (runc, crun, runsc)")
	netCost := flag.Bool("engine-network", false, "with -engine: instead, what the sandbox network costs a container's making and removal (plain containers on it, with network none, and with the network disabled), under each runtime of -engine-runtimes")
	flag.Parse()
	if *engine != "" {
		var ps []int
		for _, s := range strings.Split(*engine, ",") {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				log.Fatalf("-engine: %q is not a number", s)
			}
			ps = append(ps, n)
		}
		for _, rt := range strings.Split(*engineRts, ",") {
			if *netCost {
				if err := networkCost(*engineN, ps, rt); err != nil {
					log.Fatalf("the network phase under %s: %v", rt, err)
				}
				continue
			}
			if err := engineThroughput(*engineN, ps, rt); err != nil {
				log.Fatalf("the engine phase under %s: %v", rt, err)
			}
		}
		return
	}
	if *burst != "" {
		var runs []burstRun
		for _, nb := range strings.Split(*burst, ",") {
			name, bin, ok := strings.Cut(nb, "=")
			if !ok {
				log.Fatalf("-burst: %q is not name=binary", nb)
			}
			runs = append(runs, burstRun{Name: name, Binary: bin})
		}
		for _, s := range strings.Split(*levels, ",") {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				log.Fatalf("-burst-levels: %q is not a number of clients", s)
			}
			plan.Levels = append(plan.Levels, n)
		}
		if err := burstBench(context.Background(), runs, plan); err != nil {
			log.Fatalf("the burst phase: %v", err)
		}
		return
	}
	figs := figures{}
	rts := []string{"runc"}
	if *gvisor != "" && engineHas("runsc") {
		rts = append(rts, "runsc")
	}
	if *cold > 0 {
		for _, image := range strings.Split(*images, ",") {
			coldStarts(*cold, image, "runc", figs)
		}
		if *crun != "" && engineHas("crun") {
			coldStarts(*cold, *crun, "crun", figs)
		}
		if len(rts) > 1 {
			coldStarts(*cold, *gvisor, "runsc", figs)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var kc *kubeCluster
	if *kube != "" {
		var err error
		if kc, err = readKubeEnv(*kube); err != nil {
			log.Fatal(err)
		}
		if *cold > 0 {
			if err := kubeCold(ctx, kc, *cold, rts, figs); err != nil {
				log.Fatalf("the Kubernetes cold phase: %v", err)
			}
		}
	}
	if *whole {
		if err := nodeBench(ctx, rts, nr, figs); err != nil {
			log.Fatalf("the whole-node phase: %v", err)
		}
		if kc != nil {
			kr := nr
			kr.Kube = kc
			if err := nodeBench(ctx, rts, kr, figs); err != nil {
				log.Fatalf("the whole-node phase on Kubernetes: %v", err)
			}
		}
	}
	defer figs.ratios()
	if err := leasePath(ctx, *leases); err != nil {
		log.Fatalf("the lease-path phase: %v", err)
	}
}

// poolLog is where a pool under benchmark says what went wrong: warnings and errors to stderr,
// so that a pool that does not fill says why instead of leaving a wait to give up in silence.
func poolLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// leasePath measures the lease path alone, n leases per concurrency level, over sandboxes
// registered by a runtime that starts nothing.
func leasePath(ctx context.Context, n int) error {
	dir, err := os.MkdirTemp("", "poolbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sink, err := audit.OpenFile(audit.FileConfig{Dir: dir + "/audit"})
	if err != nil {
		return err
	}
	defer sink.Close()
	warmWant := n + 50
	env, err := pooltest.Start(ctx, dir, pooltest.EnvConfig{Node: "bench",
		Templates: []pool.Template{{MinWarm: warmWant, MaxTotal: 100000, DefaultTTL: 10 * time.Minute, MaxTTL: time.Hour}},
		Pool:      func(c *pool.Config) { c.Audit, c.RefillParallel, c.Logger = sink, 8, poolLog() }})
	if err != nil {
		return err
	}
	defer env.Close()
	cache, iss := env.Cache, env.Issuer
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	key := "bench-key"
	srv := &http.Server{Handler: api.New(api.Config{Pool: env.Manager, Keys: map[string]string{api.HashKey(key): "bench"}, Logger: poolLog()})}
	go srv.Serve(l)
	defer srv.Close()
	c := &client.Client{Addr: "http://" + l.Addr().String(), Token: key,
		HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	// full waits for the pool to hold warmWant warm sandboxes, saying what it last saw if it
	// gives up: the count, or the API's error.
	full := func(when string) error {
		var last string
		err := wait.Until(2*time.Minute, fmt.Sprintf("the pool to hold %d warm sandboxes %s", warmWant, when), func() bool {
			ps, err := c.Pools(ctx)
			switch {
			case err != nil:
				last = "the API answered: " + err.Error()
			case len(ps) != 1:
				last = fmt.Sprintf("the API listed %d pools", len(ps))
			default:
				last = fmt.Sprintf("%d warm, %d leased", ps[0].Warm, ps[0].Leased)
				if !cache.Live() {
					last += ", the binding cache not yet subscribed"
				}
				return ps[0].Warm >= warmWant && cache.Live()
			}
			return false
		})
		if err != nil {
			return fmt.Errorf("%w (last seen: %s)", err, last)
		}
		return nil
	}
	if err := full("before the first round"); err != nil {
		return err
	}
	scopes := []scope.Scope{{Host: "api.github.com", Methods: []string{"GET"}}, {Host: "*.pythonhosted.org"}}
	fmt.Println("The lease path alone (sandboxes registered by a runtime that starts nothing):")
	fmt.Println()
	fmt.Println("| concurrent clients | leases | p50 ms | p99 ms | leases/s |")
	fmt.Println("|---|---|---|---|---|")
	for _, conc := range []int{1, 10, 50} {
		toks := make(chan string, n)
		for i := range n {
			t, err := iss.Mint(fmt.Sprintf("task-%d-%d", conc, i), "bench", scopes, 10*time.Minute)
			if err != nil {
				return err
			}
			toks <- t
		}
		close(toks)
		var mu sync.Mutex
		var lat []time.Duration
		var ids []string
		var errs []error
		var wg sync.WaitGroup
		start := time.Now()
		for range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for t := range toks {
					s := time.Now()
					lv, err := c.Lease(ctx, api.LeaseRequest{Template: "default", Token: t})
					d := time.Since(s)
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else {
						lat, ids = append(lat, d), append(ids, lv.ID)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		total := time.Since(start)
		if len(errs) > 0 {
			return fmt.Errorf("%d of %d leases at %d clients failed: %w", len(errs), n, conc, errors.Join(errs[:min(len(errs), 3)]...))
		}
		fmt.Printf("| %d | %d | %.2f | %.2f | %.0f |\n", conc, len(lat), ms(pct(lat, 0.5)), ms(pct(lat, 0.99)), float64(len(lat))/total.Seconds())
		for _, id := range ids {
			if err := c.Release(ctx, id); err != nil {
				return fmt.Errorf("release %s: %w", id, err)
			}
		}
		if err := full(fmt.Sprintf("after the round at %d clients", conc)); err != nil {
			return err
		}
	}
	return nil
}

// coldStarts creates n hardened sandboxes one after another on the local engine, reporting the
// time each Create took (container create, start and address; the exec agent starts after) and
// the memory each idle sandbox uses, its agent included, then removes them and their network.
// The default image's figures go into figs, for the runsc/runc ratios.
func coldStarts(n int, image, runtime string, figs figures) {
	ctx := context.Background()
	rt, done, err := benchRuntime(ctx, "poolbench", "airlock-poolbench", "airlock-pb", 216)
	if err != nil {
		log.Fatal(err)
	}
	defer done()
	t := benchTemplate(image, runtime)
	var took []time.Duration
	var ids []string
	defer func() {
		for _, id := range ids {
			rt.Destroy(ctx, id)
		}
	}()
	for range n {
		s := time.Now()
		sb, err := rt.Create(ctx, t)
		if err != nil {
			log.Fatal(err)
		}
		took = append(took, time.Since(s))
		ids = append(ids, sb.ID)
	}
	time.Sleep(2 * time.Second) // let the idle sandboxes settle
	var mem []float64
	for _, id := range ids {
		out, err := exec.Command("docker", "stats", "--no-stream", "--format", "{{.MemUsage}}", id).Output()
		if err != nil {
			continue
		}
		var v float64
		var unit string
		fmt.Sscanf(strings.Fields(string(out))[0], "%f%s", &v, &unit)
		switch unit {
		case "KiB":
			v /= 1024
		case "GiB":
			v *= 1024
		}
		mem = append(mem, v)
	}
	slices.Sort(mem)
	fmt.Printf("%s under %s: cold start (create, start and address a hardened sandbox, %d in a row): p50 %.0f ms, p99 %.0f ms\n",
		image, runtime, n, ms(pct(took, 0.5)), ms(pct(took, 0.99)))
	if image == "airlock/default:latest" {
		figs.set(runtime, "cold start p50", ms(pct(took, 0.5)))
		figs.set(runtime, "cold start p99", ms(pct(took, 0.99)))
	}
	if len(mem) > 0 {
		fmt.Printf("Memory per idle warm sandbox (docker stats): median %.2f MiB, max %.2f MiB\n\n", mem[len(mem)/2], mem[len(mem)-1])
		if image == "airlock/default:latest" {
			figs.set(runtime, "idle memory MiB (median)", mem[len(mem)/2])
		}
	}
}

// engineHas reports whether the local engine lists the OCI runtime name.
func engineHas(name string) bool {
	out, err := exec.Command("docker", "info", "--format", "{{range $k, $v := .Runtimes}}{{$k}} {{end}}").Output()
	return err == nil && slices.Contains(strings.Fields(string(out)), name)
}

// engineThroughput measures how many sandboxes per second the local engine makes and removes
// under the runtime rt with p at once, for each p of parallel: each of p workers loops creating
// a hardened sandbox, running `true` in it (so its exec agent is up, as the refill's check waits
// for), and destroying it, n sandboxes in all per level; what the refill's parallel bound is
// chosen by.
func engineThroughput(n int, parallel []int, rt string) error {
	ctx := context.Background()
	t := benchTemplate("airlock/default:latest", rt)
	if !engineHas(t.EngineRuntime()) {
		return fmt.Errorf("the engine has no runtime %s", t.EngineRuntime())
	}
	eng, done, err := benchRuntime(ctx, "poolbench-engine", "airlock-pbengine", "airlock-pbe", 217)
	if err != nil {
		return err
	}
	defer done()
	fmt.Printf("The engine's sandbox throughput (%s; each worker loops create, run `true`, destroy; %d sandboxes per level):\n\n", rt, n)
	fmt.Println("| at once | sandboxes/s | create p50 ms | create p99 ms | first `true` p50 ms | destroy p50 ms | destroy p99 ms |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, p := range parallel {
		jobs := make(chan struct{}, n)
		for range n {
			jobs <- struct{}{}
		}
		close(jobs)
		var mu sync.Mutex
		var create, first, destroy []time.Duration
		var errs []error
		var wg sync.WaitGroup
		start := time.Now()
		for range p {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range jobs {
					s := time.Now()
					sb, err := eng.Create(ctx, t)
					c := time.Since(s)
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						continue
					}
					s = time.Now()
					code, err := eng.Exec(ctx, sb, pool.ExecRequest{Cmd: []string{"true"}}, nil, io.Discard, io.Discard)
					f := time.Since(s)
					s = time.Now()
					derr := eng.Destroy(ctx, sb.ID)
					d := time.Since(s)
					mu.Lock()
					create, first, destroy = append(create, c), append(first, f), append(destroy, d)
					if err == nil && code != 0 {
						err = fmt.Errorf("`true` exited %d", code)
					}
					errs = append(errs, err, derr)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("at %d at once: %w", p, err)
		}
		fmt.Printf("| %d | %.2f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", p, float64(n)/took.Seconds(), ms(pct(create, 0.5)), ms(pct(create, 0.99)),
			ms(pct(first, 0.5)), ms(pct(destroy, 0.5)), ms(pct(destroy, 0.99)))
	}
	fmt.Println()
	return nil
}

// benchRuntime is a Docker runtime of its own for the phases that make sandboxes without a
// node: a network 10.<octet>.0.0/24 under the names given, and empty CA files (nothing in
// these sandboxes goes out). done removes the network and the files.
func benchRuntime(ctx context.Context, node, network, bridge string, octet int) (*docker.Runtime, func(), error) {
	dir, err := os.MkdirTemp("", node)
	if err != nil {
		return nil, nil, err
	}
	gw := fmt.Sprintf("10.%d.0.1", octet)
	bundle, store, resolv := dir+"/bundle.pem", dir+"/truststore.p12", dir+"/resolv.conf"
	os.WriteFile(bundle, []byte{}, 0o644)
	os.WriteFile(store, []byte{}, 0o644)
	os.WriteFile(resolv, []byte("nameserver "+gw+"\n"), 0o644)
	rt, err := docker.New(docker.Config{Node: node, Network: network, Bridge: bridge,
		Subnet: netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/24", octet)), ProxyURL: "http://" + gw + ":3128", CABundle: bundle, TrustStore: store,
		ResolvConf: resolv, Agent: docker.SelfAgent()})
	if err == nil {
		err = rt.EnsureNetwork(ctx)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return rt, func() { rt.RemoveNetwork(ctx); os.RemoveAll(dir) }, nil
}

// benchTemplate is the default template's hardening and sizes on image under runtime.
func benchTemplate(image, runtime string) pool.Template {
	return pool.Template{Name: "default", Image: image, User: "10001:10001", Workdir: "/workspace", CPUs: 1, MemoryMB: 512,
		Pids: 256, WorkspaceMB: 256, TmpMB: 64, NoFile: 4096, NProc: 4096, Runtime: runtime}
}
