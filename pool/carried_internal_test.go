package pool

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A carried process's label fits a manifest's label whatever its command line and working
// folder hold (JSON escapes grow them), and says where it was cut; what fits is kept whole.
func TestCarriedLabelFits(t *testing.T) {
	base := carried{ID: "p-0123abcd", Marker: "0123456789abcdef", Started: time.Now()}
	long := strings.Repeat("<", 900)
	for name, c := range map[string]carried{
		"short":                   {Cmd: []string{"sleep", "60"}, Workdir: "/workspace"},
		"a working folder of <":   {Cmd: []string{"sleep", "60"}, Workdir: "/workspace/" + long},
		"control characters":      {Cmd: []string{"sh", "-c", strings.Repeat("\x01", 400)}},
		"many arguments":          {Cmd: strings.Split(strings.Repeat("arg ", 500), " ")},
		"one argument too long":   {Cmd: []string{strings.Repeat("é", 800)}},
		"two, the first too long": {Cmd: []string{long + long, "x"}},
	} {
		c.ID, c.Marker, c.Started = base.ID, base.Marker, base.Started
		label := fitLabel(c)
		var back carried
		if len(label) > maxCarriedLabel || json.Unmarshal([]byte(label), &back) != nil || back.ID != c.ID || len(back.Cmd) == 0 {
			t.Errorf("%s: a label of %d bytes, reading back as %+v", name, len(label), back)
			continue
		}
		if name == "short" && (back.Workdir != "/workspace" || strings.Join(back.Cmd, " ") != "sleep 60") {
			t.Errorf("a short label was cut: %+v", back)
		}
		if name != "short" && name != "a working folder of <" && back.Cmd[len(back.Cmd)-1] != "…" {
			t.Errorf("%s: cut without saying so: %q", name, back.Cmd)
		}
		if name == "two, the first too long" && !strings.HasPrefix(back.Cmd[0], "<") {
			t.Errorf("%s: the first argument was lost: %q", name, back.Cmd)
		}
	}
}
