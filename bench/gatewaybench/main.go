// Command gatewaybench runs the pieces of the gateway benchmark (make bench-gateway): a loopback
// upstream, airlock's gateway configured for the load generator's address, and a Go load
// generator for intercepted HTTPS, which wrk cannot drive through a proxy.
//
//	gatewaybench upstream -http 127.0.0.1:18081 -https 127.0.0.1:18443 -cert DIR
//	gatewaybench gateway  -listen 127.0.0.1:18080 -http-upstream 127.0.0.1:18081 -https-upstream 127.0.0.1:18443 -cert DIR -audit FILE
//	gatewaybench load     -url https://upstream.bench:18443/ [-proxy http://127.0.0.1:18080] -cert DIR -c 32 -d 8s
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/bench/benchcmd"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/gateway"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/gateway/ca"
	"github.com/airlock-dev/airlock/scope"
)

// BenchHost is the name the gateway pins to the loopback upstream.
const BenchHost = "upstream.bench"

func main() {
	benchcmd.Main("gatewaybench", map[string]func(context.Context, []string) error{
		"upstream": runUpstream,
		"gateway":  runGateway,
		"load":     runLoad,
	})
}

var hello = []byte("hello from the benchmark upstream\n")

func runUpstream(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ExitOnError)
	httpAddr := fs.String("http", "127.0.0.1:18081", "plain HTTP listen address")
	httpsAddr := fs.String("https", "127.0.0.1:18443", "TLS listen address")
	dir := fs.String("cert", "", "directory for the benchmark CA")
	fs.Parse(args)
	auth, err := ca.LoadOrCreate(*dir, "bench CA")
	if err != nil {
		return err
	}
	leaf, err := auth.Leaf(BenchHost)
	if err != nil {
		return err
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.Write(hello)
	})
	plain := &http.Server{Addr: *httpAddr, Handler: h}
	tlsSrv := &http.Server{Addr: *httpsAddr, Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{*leaf}}}
	go plain.ListenAndServe()
	go tlsSrv.ListenAndServeTLS("", "")
	<-ctx.Done()
	plain.Close()
	tlsSrv.Close()
	return nil
}

func runGateway(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gateway", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:18080", "gateway listen address")
	httpUp := fs.String("http-upstream", "127.0.0.1:18081", "plain upstream")
	httpsUp := fs.String("https-upstream", "127.0.0.1:18443", "TLS upstream")
	dir := fs.String("cert", "", "directory of the benchmark CA")
	auditPath := fs.String("audit", "", "audit trail directory (required: the benchmark runs with audit on)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile here")
	fs.Parse(args)
	stopProfile, err := benchcmd.Profile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	if *auditPath == "" {
		return errors.New("-audit is required")
	}
	auth, err := ca.LoadOrCreate(*dir, "bench CA")
	if err != nil {
		return err
	}
	sink, err := audit.OpenFile(audit.FileConfig{Dir: *auditPath, Node: "bench", Queue: 1 << 16})
	if err != nil {
		return err
	}
	defer sink.Close()
	set, err := scope.Parse([]scope.Scope{{Host: BenchHost, Ports: []int{18081, 18443}}})
	if err != nil {
		return err
	}
	catalog, _ := broker.NewCatalog(nil)
	_, hp, _ := net.SplitHostPort(*httpUp)
	_, sp, _ := net.SplitHostPort(*httpsUp)
	p := gateway.New(gateway.Config{
		Node:     "bench",
		Bindings: binding.Static{Binding: binding.Binding{Lease: "l-bench", Task: "bench", Expires: time.Now().Add(24 * time.Hour), Scopes: set}},
		CA:       auth, Catalog: catalog, Audit: sink, UpstreamRoots: auth.Pool(),
		PrivateUpstreams: map[string]netip.AddrPort{
			BenchHost + ":" + hp: netip.MustParseAddrPort(*httpUp),
			BenchHost + ":" + sp: netip.MustParseAddrPort(*httpsUp),
		},
	})
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	go p.Serve(l)
	<-ctx.Done()
	return p.Close()
}

func runLoad(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	target := fs.String("url", "", "URL to request")
	proxy := fs.String("proxy", "", "proxy URL (empty: direct)")
	dir := fs.String("cert", "", "directory of the benchmark CA")
	conns := fs.Int("c", 32, "concurrent connections")
	dur := fs.Duration("d", 8*time.Second, "duration")
	fs.Parse(args)
	auth, err := ca.LoadOrCreate(*dir, "bench CA")
	if err != nil {
		return err
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: auth.Pool()},
		MaxIdleConnsPerHost: *conns, MaxConnsPerHost: *conns, DisableCompression: true,
	}
	if *proxy != "" {
		pu, err := url.Parse(*proxy)
		if err != nil {
			return err
		}
		tr.Proxy = http.ProxyURL(pu)
	}
	if u, _ := url.Parse(*target); u != nil && u.Hostname() == BenchHost && *proxy == "" {
		// Direct: resolve the benchmark name to the loopback upstream ourselves.
		_, port, _ := net.SplitHostPort(u.Host)
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, "127.0.0.1:"+port)
		}
	}
	client := &http.Client{Transport: tr}
	deadline := time.Now().Add(*dur)
	var count atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1<<16)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				start := time.Now()
				resp, err := client.Get(*target)
				if err != nil {
					log.Printf("request: %v", err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					log.Printf("status %d", resp.StatusCode)
					continue
				}
				local = append(local, time.Since(start))
				count.Add(1)
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(float64(len(lat)-1)*p)]
	}
	fmt.Printf("requests=%d rps=%.0f p50_us=%d p99_us=%d\n", count.Load(), float64(count.Load())/dur.Seconds(),
		pct(0.50).Microseconds(), pct(0.99).Microseconds())
	return nil
}
