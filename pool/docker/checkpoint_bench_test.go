package docker

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"
)

// holder is a main process that holds 100 MiB of random bytes (which no compression shrinks)
// and then idles.
var holder = []string{"python3", "-c", `import os, time
b = bytearray(os.urandom(100 << 20))
open("/workspace/ready", "w").write("1")
while True:
    time.sleep(3600)
`}

// BenchmarkCheckpoint times Checkpoint and Restore of one sandbox, over and over, per runtime:
// an idle sandbox as Create makes it, and one whose main process holds 100 MiB. It reports
// each half apart (ms/checkpoint, ms/restore) and the checkpoint's size (MiB/checkpoint); a
// runtime that cannot checkpoint is skipped with CanCheckpoint's reason.
func BenchmarkCheckpoint(b *testing.B) {
	r := engineNetworked(b)
	for _, rt := range []string{"runsc", "runsc-ptrace", "runc"} {
		for _, load := range []string{"idle", "100MiB"} {
			b.Run(rt+"/"+load, func(b *testing.B) {
				tmpl := testTemplate(rt)
				canCheckpoint(b, r, tmpl)
				sb := newSandbox(b, r, tmpl)
				if load == "100MiB" {
					sb = withMain(b, r, sb, holder, nil, false)
					wait.For(b, time.Minute, "the 100 MiB to be held", func() bool {
						return runIn(b, r, sb, "sh", "-c", "cat /workspace/ready 2>/dev/null || true") == "1"
					})
				}
				ctx := context.Background()
				var took [2]time.Duration
				var size int64
				n := 0
				for b.Loop() {
					dir := filepath.Join(b.TempDir(), "checkpoint")
					start := time.Now()
					if err := r.Checkpoint(ctx, sb, dir); err != nil {
						b.Fatal(err)
					}
					took[0] += time.Since(start)
					size = dirSize(dir)
					start = time.Now()
					restored, err := r.Restore(ctx, sb, dir)
					if err != nil {
						b.Fatal(err)
					}
					took[1] += time.Since(start)
					sb = restored
					os.RemoveAll(dir)
					n++
				}
				b.ReportMetric(float64(took[0].Milliseconds())/float64(n), "ms/checkpoint")
				b.ReportMetric(float64(took[1].Milliseconds())/float64(n), "ms/restore")
				b.ReportMetric(float64(size)/(1<<20), "MiB/checkpoint")
			})
		}
	}
}

func dirSize(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}
