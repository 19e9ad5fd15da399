package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/inside"
)

// Pool holds node-wide pool settings.
type Pool struct {
	// KeepOnStop keeps sandboxes, leases, the sandbox network and its firewall rules when the
	// node stops, and adopts them when it starts again: a production node restarts without
	// ending leases. Off (the dev default), a stop removes everything it made.
	KeepOnStop bool `yaml:"keep_on_stop"`
	// HealthEvery is how often warm sandboxes are probed.
	HealthEvery time.Duration `yaml:"health_every"`
	// RefillParallel is how many sandboxes the refill makes at once (0: pool's default, the
	// best measured on the engine of a 2-core machine; see docs/bench-pool.md).
	RefillParallel int `yaml:"refill_parallel"`
	// MemoryBudgetMB bounds the memory limits of all the node's sandboxes together, warm,
	// leased and being made: no sandbox is made past it. 0: the host's physical memory.
	MemoryBudgetMB int64 `yaml:"memory_budget_mb"`
}

// DefaultTemplate is the hardened default sandbox.
func DefaultTemplate() pool.Template {
	return pool.Template{
		Name: "default", Image: "airlock/default:latest", User: "10001:10001", Workdir: "/workspace",
		CPUs: 1, MemoryMB: 512, Pids: 256, WorkspaceMB: 256, TmpMB: 64, NoFile: 4096, NProc: 4096, Runtime: "runc",
		MinWarm: 2, MaxWarm: 16, MaxTotal: 32, OnEmpty: "wait", WaitFor: 10 * time.Second, AfterWait: "cold", DefaultTTL: 30 * time.Minute, MaxTTL: 4 * time.Hour,
	}
}

// Toolchain is a shipped toolchain template ("python": python3, venv, pip, pytest; "node":
// Debian's nodejs and npm): the default's hardening and sizes, its own image, one warm sandbox.
func Toolchain(name string) pool.Template {
	t := DefaultTemplate()
	t.Name, t.Image, t.MinWarm, t.MaxWarm = name, "airlock/"+name+":latest", 1, 4
	t.MemoryMB, t.WorkspaceMB = 1024, 512
	return t
}

// GVisor is the default template under gVisor's runsc, a user-space kernel between the
// sandbox and the host's: the embedded defaults warm it where the engine has runsc.
func GVisor() pool.Template {
	t := DefaultTemplate()
	t.Name, t.Runtime, t.MinWarm, t.MaxWarm = "gvisor", "runsc", 1, 4
	return t
}

// builtImage is the image a template built from a Dockerfile or devcontainer.json is tagged
// with unless it names one.
func builtImage(name string) string { return "airlock/template-" + name + ":latest" }

func (p Pool) validate(bad badFunc) {
	if p.HealthEvery < 0 {
		bad("pool.health_every", "must be >= 0")
	}
	if p.RefillParallel < 0 || p.RefillParallel > 64 {
		bad("pool.refill_parallel", "must be between 0 and 64")
	}
	if p.MemoryBudgetMB < 0 {
		bad("pool.memory_budget_mb", "must be >= 0")
	}
}

// validateTemplates checks what the configuration asks of its templates beyond each one's own
// rules: at least one, no name twice, and no template built from a Dockerfile or
// devcontainer.json writing over a shipped image. Each template's own rules
// (pool.Template.Validate) come back as its errors, under templates[i].
func validateTemplates(ts []pool.Template, bad badFunc) []error {
	var errs []error
	if len(ts) == 0 {
		bad("templates", "at least one template is required")
	}
	names := map[string]bool{}
	for i, t := range ts {
		f := fmt.Sprintf("templates[%d]", i)
		if t.Name != "" && names[t.Name] {
			bad(f+".name", "duplicate %q", t.Name)
		}
		names[t.Name] = true
		for _, err := range t.Validate() {
			errs = append(errs, fmt.Errorf("%s.%w", f, err))
		}
		if t.Built() && shipped(t.Image) {
			bad(f+".image", "%s is a shipped image; a template built from a Dockerfile or devcontainer.json writes its own (leave image out: %s)", t.Image, builtImage(t.Name))
		}
	}
	return errs
}

// shipped reports whether image names one of the images airlock ships (airlock/NAME, any tag),
// which a built template must not write over. Another repository of the same name (node:20,
// library/python) is not airlock's.
func shipped(image string) bool {
	repo, _, _ := strings.Cut(image, ":")
	name, ok := strings.CutPrefix(repo, "airlock/")
	return ok && slices.Contains(inside.ShippedImages, name)
}
