package config

import (
	"net/url"
	"time"
)

// Snapshots is where the state that travels is kept (package snapshot): workspace snapshots,
// paused leases and caches, each encrypted under a data key wrapped by its tenant's key in
// Vault's transit engine, which the node never holds.
type Snapshots struct {
	// Store is "dir" (the default: a directory under state_dir, for one node), "s3" (an
	// S3-compatible bucket, for several nodes: a snapshot taken on one seeds a lease on another)
	// or "off" (snapshots, leases from them and pauses are refused).
	Store string `yaml:"store"`
	// Dir is the dir store's directory; default state_dir/snapshots.
	Dir string `yaml:"dir"`
	S3  S3     `yaml:"s3"`
	// TransitMount is the mount of Vault's transit engine that holds the tenants' keys; default
	// "transit". The node's Vault token needs create and update on transit/keys/airlock-*,
	// transit/datakey/plaintext/airlock-* and transit/decrypt/airlock-*.
	TransitMount string `yaml:"transit_mount"`
	// Retention bounds each tenant's snapshots (not caches): past any bound the oldest are
	// deleted, and each deletion recorded. Its max_count and max_total_mb bound the tenant's
	// paused leases too, counted apart: a pause past them is refused and the lease runs on.
	Retention Retention `yaml:"retention"`
}

// S3 is an S3-compatible bucket. Its keys are read from files (or the environment variables
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), never from this file.
type S3 struct {
	// Endpoint is the server's URL: https://s3.example.internal, or http:// on loopback.
	Endpoint      string `yaml:"endpoint"`
	Bucket        string `yaml:"bucket"`
	Region        string `yaml:"region"`
	Prefix        string `yaml:"prefix"`
	AccessKeyFile string `yaml:"access_key_file"`
	SecretKeyFile string `yaml:"secret_key_file"`
	// PartMB is the size of an upload's parts; an interrupted upload resumes from its last
	// stored part. Default 8.
	PartMB int `yaml:"part_mb"`
}

// Retention bounds one tenant's snapshots; zero leaves a bound off.
type Retention struct {
	MaxCount   int           `yaml:"max_count"`
	MaxAge     time.Duration `yaml:"max_age"`
	MaxTotalMB int64         `yaml:"max_total_mb"`
}

// DefaultRetention keeps 100 snapshots of a tenant, for 30 days, 20 GiB in all.
var DefaultRetention = Retention{MaxCount: 100, MaxAge: 30 * 24 * time.Hour, MaxTotalMB: 20 << 10}

func (s Snapshots) validate(bad badFunc) {
	switch s.Store {
	case "", "dir", "off":
	case "s3":
		u, err := url.Parse(s.S3.Endpoint)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("snapshots.s3.endpoint", "%q is not an http:// or https:// URL", s.S3.Endpoint)
		}
		if s.S3.Bucket == "" {
			bad("snapshots.s3.bucket", "required for the s3 store")
		}
		if (s.S3.AccessKeyFile == "") != (s.S3.SecretKeyFile == "") {
			bad("snapshots.s3", "set access_key_file and secret_key_file together (or neither, to read AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
		}
		if s.S3.PartMB < 0 || (s.S3.PartMB > 0 && s.S3.PartMB < 5) {
			bad("snapshots.s3.part_mb", "must be at least 5 (the smallest part S3 takes), or 0 for 8")
		}
	default:
		bad("snapshots.store", "%q is not dir, s3 or off", s.Store)
	}
	r := s.Retention
	if r.MaxCount < 0 || r.MaxAge < 0 || r.MaxTotalMB < 0 {
		bad("snapshots.retention", "bounds must be >= 0 (0 leaves one off)")
	}
}
