package config

import (
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/audit/ship"
)

// Audit is the audit trail.
type Audit struct {
	Dir        string        `yaml:"dir"` // empty: audit/ in the state dir
	FlushEvery time.Duration `yaml:"flush_every"`
	// Segments are sealed at SegmentBytes or after SegmentAge; sealed ones are deleted when
	// older than KeepFor or while the trail is larger than KeepBytes (zero: never).
	SegmentBytes int64         `yaml:"segment_bytes"`
	SegmentAge   time.Duration `yaml:"segment_age"`
	KeepFor      time.Duration `yaml:"keep_for"`
	KeepBytes    int64         `yaml:"keep_bytes"`
	// Key is the node's checkpoint signing key (created when missing; its public half is
	// written beside it as Key+".pub"). Empty: audit-key in the state dir.
	Key             string        `yaml:"key"`
	CheckpointEvery time.Duration `yaml:"checkpoint_every"`
	// OutputHead is how many bytes of each command's stdout and stderr its exec record keeps,
	// redacted of the lease's credentials (0: none; sizes and SHA-256 are always recorded).
	OutputHead int `yaml:"output_head"`
	// Sinks push every record, after the local write, to syslog receivers and HTTP endpoints.
	Sinks []ship.Config `yaml:"sinks"`
}

func (a Audit) validate(bad badFunc) {
	if a.SegmentBytes < 64<<10 || a.SegmentBytes > 1<<30 {
		bad("audit.segment_bytes", "must be 64 KiB to 1 GiB (%d)", a.SegmentBytes)
	}
	if a.SegmentAge < time.Second || a.CheckpointEvery < 100*time.Millisecond || a.FlushEvery <= 0 {
		bad("audit", "segment_age must be >= 1s, checkpoint_every >= 100ms and flush_every > 0")
	}
	sinks := map[string]bool{}
	for i, sk := range a.Sinks {
		if err := sk.Validate(); err != nil {
			bad(fmt.Sprintf("audit.sinks[%d]", i), "%v", err)
		}
		if sinks[sk.Name] {
			bad(fmt.Sprintf("audit.sinks[%d].name", i), "%q is used twice", sk.Name)
		}
		sinks[sk.Name] = true
	}
	if a.OutputHead < 0 || a.OutputHead > 64<<10 {
		bad("audit.output_head", "must be 0 to 65536 bytes")
	}
	if a.KeepFor < 0 || a.KeepBytes < 0 {
		bad("audit", "keep_for and keep_bytes must be >= 0 (0 keeps everything)")
	}
	if a.KeepBytes > 0 && a.KeepBytes < 2*a.SegmentBytes {
		bad("audit.keep_bytes", "must be at least twice audit.segment_bytes, or retention would delete every sealed segment at once")
	}
}
