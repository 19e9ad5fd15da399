package config

import (
	"time"
)

// Redis is the shared store.
type Redis struct {
	// URL of an external Redis; empty runs a private redis-server in the state dir.
	URL   string        `yaml:"url"`
	Grace time.Duration `yaml:"grace"` // how long cached bindings serve with Redis down
}

func (r Redis) validate(bad badFunc) {
	if r.Grace < 0 || r.Grace > time.Minute {
		bad("redis.grace", "must be between 0 and 1m")
	}
}
