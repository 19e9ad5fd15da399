// Command poolbench measures the warm lease path (make bench-pool): the HTTP API, task token
// verification, the atomic claim and the binding write and announcement in a real Redis, with
// the binding visible to the node's cache before the lease returns. The lease path makes no
// Docker call by design, so the sandboxes here are registered in Redis by a runtime that starts
// nothing; cold start and memory per sandbox are measured against the real engine by
// scripts/bench-pool.sh.
package main

import (
	"context"
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
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/api"
	"github.com/airlock-dev/airlock/pool/client"
	"github.com/airlock-dev/airlock/pool/docker"
	"github.com/airlock-dev/airlock/pool/pooltest"
	"github.com/airlock-dev/airlock/scope"
)

func main() {
	leases := flag.Int("n", 400, "leases per concurrency level")
	cold := flag.Int("cold", 0, "also start this many real sandboxes on the local Docker engine, for cold start and memory")
	images := flag.String("images", "airlock/default:latest,airlock/python:latest,airlock/node:latest", "sandbox images for -cold, comma-separated: one measurement each, under runc")
	gvisor := flag.String("gvisor", "airlock/default:latest", "also measure this image under runsc, when the engine has it (empty: no)")
	var nr nodeRun
	whole := flag.Bool("node", false, "also run a whole node with real warm sandboxes under each runtime: leases, first exec, the gateway's latency from inside")
	flag.IntVar(&nr.Rounds, "rounds", 3, "with -node: rounds of leases per concurrency level")
	flag.IntVar(&nr.Warm, "warm", 10, "with -node: warm sandboxes per runtime, leased in each round")
	flag.StringVar(&nr.Vault, "vault", "bin/vault", "with -node: the Vault binary (make vault)")
	flag.IntVar(&nr.Requests, "requests", 50, "with -node: requests per connection mode for the gateway's latency")
	flag.Parse()
	figs := figures{}
	rts := []string{"runc"}
	if *gvisor != "" && engineHas("runsc") {
		rts = append(rts, "runsc")
	}
	if *cold > 0 {
		for _, image := range strings.Split(*images, ",") {
			coldStarts(*cold, image, "runc", figs)
		}
		if len(rts) > 1 {
			coldStarts(*cold, *gvisor, "runsc", figs)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if *whole {
		if err := nodeBench(ctx, rts, nr, figs); err != nil {
			log.Fatalf("the whole-node phase: %v", err)
		}
	}
	defer figs.ratios()
	dir, _ := os.MkdirTemp("", "poolbench")
	defer os.RemoveAll(dir)
	sink, err := audit.OpenFile(audit.FileConfig{Dir: dir + "/audit"})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()
	env, err := pooltest.Start(ctx, dir, pooltest.EnvConfig{Node: "bench",
		Templates: []pool.Template{{MinWarm: *leases + 50, MaxTotal: 100000, DefaultTTL: 10 * time.Minute, MaxTTL: time.Hour}},
		Pool:      func(c *pool.Config) { c.Audit, c.RefillParallel = sink, 8 }})
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	mgr, cache, iss := env.Manager, env.Cache, env.Issuer
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	key := "bench-key"
	srv := &http.Server{Handler: api.New(api.Config{Pool: mgr, Keys: map[string]string{api.HashKey(key): "bench"}, Logger: quiet})}
	go srv.Serve(l)
	c := &client.Client{Addr: "http://" + l.Addr().String(), Token: key,
		HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	for {
		ps, _ := c.Pools(ctx)
		if len(ps) == 1 && ps[0].Warm >= *leases+50 && cache.Live() {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	scopes := []scope.Scope{{Host: "api.github.com", Methods: []string{"GET"}}, {Host: "*.pythonhosted.org"}}
	fmt.Println("The lease path alone (sandboxes registered by a runtime that starts nothing):")
	fmt.Println()
	fmt.Println("| concurrent clients | leases | p50 ms | p99 ms | leases/s |")
	fmt.Println("|---|---|---|---|---|")
	for _, conc := range []int{1, 10, 50} {
		toks := make(chan string, *leases)
		for i := range *leases {
			t, _ := iss.Mint(fmt.Sprintf("task-%d-%d", conc, i), "bench", scopes, 10*time.Minute)
			toks <- t
		}
		close(toks)
		var mu sync.Mutex
		var lat []time.Duration
		var ids []string
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
					if err != nil {
						log.Printf("lease: %v", err)
						continue
					}
					mu.Lock()
					lat, ids = append(lat, d), append(ids, lv.ID)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		total := time.Since(start)
		slices.Sort(lat)
		p := func(q float64) float64 { return float64(lat[int(float64(len(lat)-1)*q)].Microseconds()) / 1000 }
		fmt.Printf("| %d | %d | %.2f | %.2f | %.0f |\n", conc, len(lat), p(0.5), p(0.99), float64(len(lat))/total.Seconds())
		for _, id := range ids {
			c.Release(ctx, id)
		}
		for {
			ps, _ := c.Pools(ctx)
			if ps[0].Warm >= *leases+50 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// coldStarts creates n hardened sandboxes one after another on the local engine, reporting the
// time each Create took (container create, start and address) and the memory each idle sandbox
// uses, then removes them and their network.
// The default image's figures go into figs, for the runsc/runc ratios.
func coldStarts(n int, image, runtime string, figs figures) {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "poolbench-cold")
	defer os.RemoveAll(dir)
	bundle, store, resolv := dir+"/bundle.pem", dir+"/truststore.p12", dir+"/resolv.conf"
	os.WriteFile(bundle, []byte{}, 0o644)
	os.WriteFile(store, []byte{}, 0o644)
	os.WriteFile(resolv, []byte("nameserver 10.216.0.1\n"), 0o644)
	rt, err := docker.New(docker.Config{Node: "poolbench", Network: "airlock-poolbench", Bridge: "airlock-pb",
		Subnet: netip.MustParsePrefix("10.216.0.0/24"), ProxyURL: "http://10.216.0.1:3128", CABundle: bundle, TrustStore: store, ResolvConf: resolv})
	if err != nil {
		log.Fatal(err)
	}
	if err := rt.EnsureNetwork(ctx); err != nil {
		log.Fatal(err)
	}
	defer rt.RemoveNetwork(ctx)
	t := pool.Template{Name: "default", Image: image, User: "10001:10001", Workdir: "/workspace", CPUs: 1, MemoryMB: 512,
		Pids: 256, WorkspaceMB: 256, TmpMB: 64, NoFile: 4096, NProc: 4096, Runtime: runtime}
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
