package config

import (
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
