package pool_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// BenchmarkLeaseExecRelease is the lease path in one process: a token verified, a warm sandbox
// claimed and bound in a real redis-server, a command run (by a runtime that starts nothing)
// and recorded, and the lease ended; the refill makes each sandbox again meanwhile. Tokens are
// minted before the timer starts. It guards the pool's shape against a slower lease path
// (docs/bench-pool.md has the whole node's figures).
func BenchmarkLeaseExecRelease(b *testing.B) {
	for _, clients := range []int{1, 8} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			e := pooltest.NewEnv(b, pooltest.EnvConfig{Templates: []pool.Template{{MinWarm: 16, MaxTotal: 64}}})
			e.MustWarm(b, 16)
			toks := make([]string, b.N)
			for i := range toks {
				tok, err := e.Issuer.Mint(fmt.Sprintf("task-%d", i), "acme", []scope.Scope{{Host: "a.example"}}, time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				toks[i] = tok
			}
			ctx := context.Background()
			var next atomic.Int64
			b.SetParallelism(clients) // clients per GOMAXPROCS; on 2 cores, 2 and 16 at once
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var out bytes.Buffer
				for pb.Next() {
					tok := toks[next.Add(1)-1]
					l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok})
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := e.Manager.Exec(ctx, "acme", l.ID, pool.ExecRequest{Cmd: []string{"true"}}, nil, &out, io.Discard); err != nil {
						b.Error(err)
					}
					if err := e.Manager.Release(ctx, "acme", l.ID); err != nil {
						b.Error(err)
					}
				}
			})
		})
	}
}
