package docker

import (
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/pool"
)

// TestCannotRunNamesTemplateAndRemedy: each template maps to one engine runtime, gVisor's
// platforms to runtimes of their own, and a runtime the engine lacks, or runs on another
// platform, is refused with the template's name and how to install it.
func TestCannotRunNamesTemplateAndRemedy(t *testing.T) {
	engine := map[string][]string{
		"runc":         nil,
		"crun":         nil,
		"runsc":        {"--platform=systrap"},
		"runsc-ptrace": {"--platform=ptrace"},
		"runsc-kvm":    {"--platform=ptrace"}, // registered by hand, wrongly
	}
	for _, c := range []struct {
		name             string
		t                pool.Template
		engineName, want string
		wantRunnable     bool
	}{
		{"runc", pool.Template{Name: "a", Runtime: "runc"}, "runc", "", true},
		{"runc by default", pool.Template{Name: "a"}, "runc", "", true},
		{"crun", pool.Template{Name: "c", Runtime: "crun"}, "crun", "", true},
		{"runsc, default platform", pool.Template{Name: "g", Runtime: "runsc"}, "runsc", "", true},
		{"runsc on systrap", pool.Template{Name: "g", Runtime: "runsc", Platform: "systrap"}, "runsc", "", true},
		{"runsc on ptrace", pool.Template{Name: "g", Runtime: "runsc", Platform: "ptrace"}, "runsc-ptrace", "", true},
		{"kvm registered on the wrong platform", pool.Template{Name: "k", Runtime: "runsc", Platform: "kvm"}, "runsc-kvm",
			"template k asks for gVisor's kvm platform, but the engine runs its runsc-kvm runtime on ptrace", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.t.EngineRuntime(); got != c.engineName {
				t.Errorf("engine runtime %q, want %q", got, c.engineName)
			}
			err := CannotRun(engine, c.t)
			if c.wantRunnable != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Errorf("CannotRun = %v, want %q", err, c.want)
			}
		})
	}
	// An engine without gVisor at all, and one without the ptrace platform.
	err := CannotRun(map[string][]string{"runc": nil}, pool.Template{Name: "gvisor", Runtime: "runsc"})
	if err == nil || !strings.Contains(err.Error(), "template gvisor asks for runsc on gVisor's systrap platform (the engine runtime runsc), which this engine does not have (it has runc)") ||
		!strings.Contains(err.Error(), "make runsc") {
		t.Errorf("no runsc: %v", err)
	}
	err = CannotRun(map[string][]string{"runc": nil, "runsc": nil}, pool.Template{Name: "p", Runtime: "runsc", Platform: "kvm"})
	if err == nil || !strings.Contains(err.Error(), "(the engine runtime runsc-kvm)") || !strings.Contains(err.Error(), `RUNSC_PLATFORMS="systrap ptrace kvm" make runsc`) {
		t.Errorf("no runsc-kvm: %v", err)
	}
	// An engine without crun says how to get it.
	err = CannotRun(map[string][]string{"runc": nil}, pool.Template{Name: "fast", Runtime: "crun"})
	if err == nil || !strings.Contains(err.Error(), "template fast asks for the crun runtime, which this engine does not have (it has runc)") ||
		!strings.Contains(err.Error(), "scripts/crun.sh") {
		t.Errorf("no crun: %v", err)
	}
	// The platform given as two arguments is read as well as the one given as one.
	if err := CannotRun(map[string][]string{"runsc": {"--platform", "ptrace"}}, pool.Template{Name: "g", Runtime: "runsc"}); err == nil {
		t.Error("runsc registered with --platform ptrace (two arguments) passed for a systrap template")
	}
	// runsc registered without --platform runs on systrap.
	if err := CannotRun(map[string][]string{"runsc": nil}, pool.Template{Name: "g", Runtime: "runsc"}); err != nil {
		t.Errorf("runsc without --platform: %v", err)
	}
}
