// Command gatewaybench runs the pieces of the gateway benchmark (make bench-gateway): a loopback
// upstream, airlock's gateway configured for the load generator's address, a Go load generator
// for what wrk cannot drive through a proxy (intercepted HTTPS kept alive or on a new
// connection per request, bulk transfers), and a holder of idle connections for the memory rows.
//
//	gatewaybench upstream -http 127.0.0.1:18081 -https 127.0.0.1:18443 -cert DIR
//	gatewaybench gateway  -listen 127.0.0.1:18080 -http-upstream 127.0.0.1:18081 -https-upstream 127.0.0.1:18443 -cert DIR -audit DIR
//	gatewaybench load     -url https://upstream.bench:18443/ [-proxy http://127.0.0.1:18080] -cert DIR [-roots PEM] -c 32 -d 8s [-new]
//	gatewaybench bulk     -url https://upstream.bench:18443/bulk [-proxy URL] -cert DIR -get 1073741824 | -put 268435456
//	gatewaybench idle     -proxy 127.0.0.1:18080 -n 1000 -mode keepalive|tunnel
//	gatewaybench relay    -listen 127.0.0.1:18086 -to 127.0.0.1:18081
//
// The gateway allows three names, all pinned to the loopback upstream: upstream.bench
// (intercepted, no credential), secret.bench (intercepted, a credential injected and every
// response scrubbed for it) and tunnel.bench (an uninspected tunnel to the TLS port).
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/gateway"
	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/gateway/ca"
	"github.com/airlock-dev/airlock/internal/benchcmd"
	"github.com/airlock-dev/airlock/scope"
)

// The names the gateway pins to the loopback upstream, and the credential the secret one gets.
const (
	BenchHost  = "upstream.bench"
	SecretHost = "secret.bench"
	TunnelHost = "tunnel.bench"
	benchToken = "bench-credential-0123456789abcdef"
)

func main() {
	benchcmd.Main("gatewaybench", map[string]func(context.Context, []string) error{
		"upstream": runUpstream,
		"gateway":  runGateway,
		"load":     runLoad,
		"bulk":     runBulk,
		"idle":     runIdle,
		"relay":    runRelay,
	})
}

var hello = []byte("hello from the benchmark upstream\n")

// filler is what /bulk sends and uploads carry: pseudo-random bytes, like the compressed
// archives agents download, so the scrubbed rows pay for scanning every byte for the credential
// and not for text that happens to share pieces of it.
var filler = func() []byte {
	b := make([]byte, 256<<10)
	r := rand.New(rand.NewPCG(18, 443))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

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
	var leaves []tls.Certificate
	for _, h := range []string{BenchHost, SecretHost, TunnelHost} {
		leaf, err := auth.Leaf(h)
		if err != nil {
			return err
		}
		leaves = append(leaves, *leaf)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.Write(hello)
	})
	// GET /bulk?bytes=N sends N bytes; a PUT or POST to it reads the body and says how much.
	mux.HandleFunc("/bulk", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%d\n", n)
			return
		}
		n, err := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "bytes: a count of bytes is required", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			k := min(n, int64(len(filler)))
			if _, err := w.Write(filler[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	// Listening first, so a port already taken (by an upstream left from another run, with
	// another CA) stops the benchmark instead of leaving it to measure that one.
	pl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return err
	}
	tl, err := net.Listen("tcp", *httpsAddr)
	if err != nil {
		return err
	}
	plain := &http.Server{Handler: mux}
	tlsSrv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: leaves}}
	go plain.Serve(pl)
	go tlsSrv.ServeTLS(tl, "", "")
	<-ctx.Done()
	plain.Close()
	tlsSrv.Close()
	return nil
}

// staticBroker hands out one fixed credential: the gateway's broker cache answers every request
// after the first in a real deployment too, so the hot path is the same.
type staticBroker struct{}

func (staticBroker) Get(context.Context, broker.Lease, *broker.Entry) (broker.Secret, error) {
	return broker.Secret{"token": benchToken}, nil
}

func (staticBroker) Release(context.Context, string) error { return nil }

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
	_, hp, _ := net.SplitHostPort(*httpUp)
	_, sp, _ := net.SplitHostPort(*httpsUp)
	hport, _ := strconv.Atoi(hp)
	sport, _ := strconv.Atoi(sp)
	set, err := scope.Parse([]scope.Scope{
		{Host: BenchHost, Ports: []int{hport, sport}},
		{Host: SecretHost, Ports: []int{sport}, Credential: "bench"},
		{Host: TunnelHost, Ports: []int{sport}, Tunnel: true},
	})
	if err != nil {
		return err
	}
	catalog, err := broker.NewCatalog([]broker.Entry{{
		Name: "bench", Source: broker.Source{Kind: broker.SourceKV, Path: "bench"},
		Inject: broker.Injection{Kind: broker.InjectHeader, Header: "Authorization", Template: "Bearer {{.token}}"},
		Hosts:  []string{SecretHost},
	}})
	if err != nil {
		return err
	}
	pins := map[string]netip.AddrPort{BenchHost + ":" + hp: netip.MustParseAddrPort(*httpUp)}
	for _, h := range []string{BenchHost, SecretHost, TunnelHost} {
		pins[h+":"+sp] = netip.MustParseAddrPort(*httpsUp)
	}
	p := gateway.New(gateway.Config{
		Node:     "bench",
		Bindings: binding.Static{Binding: binding.Binding{Lease: "l-bench", Task: "bench", Expires: time.Now().Add(24 * time.Hour), Scopes: set}},
		CA:       auth, Catalog: catalog, Broker: staticBroker{}, Audit: sink, UpstreamRoots: auth.Pool(),
		PrivateUpstreams: pins,
	})
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	go p.Serve(l)
	<-ctx.Done()
	return p.Close()
}

// transport is the load generators' client: trusting the benchmark CA and, with roots, the
// certificates in that PEM file too (Squid's own CA when it intercepts); through proxy when
// set, else straight to the loopback upstream whatever the URL's name.
//
// insecure skips building and checking the certificate chain (the handshake's signature is
// still checked): for the new-connection rows, where the load generator's chain checks on the
// shared core would otherwise cap the rate before the proxy does; the proxy's work is the same.
func transport(target, proxy, dir, roots string, conns int, insecure bool) (*http.Transport, error) {
	auth, err := ca.LoadOrCreate(dir, "bench CA")
	if err != nil {
		return nil, err
	}
	pool := auth.Pool()
	if roots != "" {
		pem, err := os.ReadFile(roots)
		if err != nil {
			return nil, err
		}
		pool = pool.Clone()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-roots %s: no certificate in it", roots)
		}
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool},
		MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true,
	}
	if insecure {
		tr.TLSClientConfig.InsecureSkipVerify = true
	}
	if proxy != "" {
		pu, err := url.Parse(proxy)
		if err != nil {
			return nil, err
		}
		tr.Proxy = http.ProxyURL(pu)
		return tr, nil
	}
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(u.Host)
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, "127.0.0.1:"+port)
	}
	return tr, nil
}

func runLoad(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	target := fs.String("url", "", "URL to request")
	proxy := fs.String("proxy", "", "proxy URL (empty: direct)")
	dir := fs.String("cert", "", "directory of the benchmark CA")
	roots := fs.String("roots", "", "a PEM file of more roots to trust")
	conns := fs.Int("c", 32, "concurrent connections")
	dur := fs.Duration("d", 8*time.Second, "duration")
	fresh := fs.Bool("new", false, "a new connection for every request: through a proxy, one CONNECT and a TLS handshake each way per request (the chain is not checked, see transport)")
	fs.Parse(args)
	tr, err := transport(*target, *proxy, *dir, *roots, *conns, *fresh)
	if err != nil {
		return err
	}
	tr.DisableKeepAlives = *fresh
	client := &http.Client{Transport: tr}
	deadline := time.Now().Add(*dur)
	var count, failed atomic.Int64
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
					if failed.Add(1) <= 5 {
						log.Printf("request: %v", err)
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					if failed.Add(1) <= 5 {
						log.Printf("status %d", resp.StatusCode)
					}
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
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d requests failed (the first five are above)", n)
	}
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

// runBulk downloads or uploads one large body on one connection and prints its rate in MB/s
// (10^6 bytes a second), checking that every byte arrived.
func runBulk(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bulk", flag.ExitOnError)
	target := fs.String("url", "", "the upstream's /bulk URL")
	proxy := fs.String("proxy", "", "proxy URL (empty: direct)")
	dir := fs.String("cert", "", "directory of the benchmark CA")
	get := fs.Int64("get", 0, "download this many bytes")
	put := fs.Int64("put", 0, "upload this many bytes")
	fs.Parse(args)
	if (*get > 0) == (*put > 0) {
		return errors.New("one of -get and -put is required")
	}
	tr, err := transport(*target, *proxy, *dir, "", 1, false)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: tr}
	// One small request first, so the rate is the transfer's and not the connection's set-up.
	if resp, err := client.Get(*target + "?bytes=1"); err != nil {
		return err
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	start := time.Now()
	var n int64
	if *get > 0 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, *target+"?bytes="+strconv.FormatInt(*get, 10), nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		n, err = io.CopyBuffer(io.Discard, resp.Body, make([]byte, 256<<10))
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || n != *get {
			return fmt.Errorf("download: status %d, %d of %d bytes, %v", resp.StatusCode, n, *get, err)
		}
	} else {
		body := io.LimitReader(repeat(filler), *put)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, *target, body)
		req.ContentLength = *put
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != strconv.FormatInt(*put, 10)+"\n" {
			return fmt.Errorf("upload: status %d, the upstream read %q of %d bytes", resp.StatusCode, got, *put)
		}
		n = *put
	}
	took := time.Since(start)
	fmt.Printf("bytes=%d seconds=%.3f mbps=%.1f\n", n, took.Seconds(), float64(n)/took.Seconds()/1e6)
	return nil
}

// repeat reads b over and over.
type repeat []byte

func (r repeat) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		n += copy(p[n:], r)
	}
	return n, nil
}

// runIdle opens n connections through the proxy and leaves them open and idle: kept-alive
// connections that have each made one plain HTTP request, or tunnels (a CONNECT answered 200,
// then nothing). It prints "ready" once all are open, and holds them until it is stopped.
func runIdle(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	proxy := fs.String("proxy", "127.0.0.1:18080", "the proxy's address")
	n := fs.Int("n", 1000, "connections")
	mode := fs.String("mode", "keepalive", "keepalive or tunnel")
	target := fs.String("target", "", "what to ask for (default: upstream.bench:18081 kept alive, tunnel.bench:18443 tunnelled)")
	fs.Parse(args)
	var req string
	switch *mode {
	case "keepalive":
		t := *target
		if t == "" {
			t = BenchHost + ":18081"
		}
		req = "GET http://" + t + "/ HTTP/1.1\r\nHost: " + t + "\r\n\r\n"
	case "tunnel":
		t := *target
		if t == "" {
			t = TunnelHost + ":18443"
		}
		req = "CONNECT " + t + " HTTP/1.1\r\nHost: " + t + "\r\n\r\n"
	default:
		return fmt.Errorf("-mode %q: keepalive or tunnel", *mode)
	}
	conns := make([]net.Conn, 0, *n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range *n {
		c, err := net.DialTimeout("tcp", *proxy, 10*time.Second)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		// A tunnel's answer has no body to read, only its head; a kept-alive answer has a length.
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodHead})
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		if *mode == "keepalive" && resp.ContentLength > 0 {
			io.CopyN(io.Discard, br, resp.ContentLength)
		}
		if resp.StatusCode != 200 {
			return fmt.Errorf("connection %d: status %d", i, resp.StatusCode)
		}
		c.SetDeadline(time.Time{})
	}
	fmt.Println("ready")
	<-ctx.Done()
	return nil
}

// runRelay copies bytes both ways between each connection accepted and a new connection to the
// upstream, and does nothing else: the floor of what any proxy on its own core adds, the two
// hops between cores that a request through it makes.
func runRelay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("relay", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:18086", "listen address")
	to := fs.String("to", "127.0.0.1:18081", "upstream address")
	fs.Parse(args)
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			return nil
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", *to)
			if err != nil {
				return
			}
			defer u.Close()
			go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
			io.Copy(c, u)
		}()
	}
}
