package config

import (
	"fmt"

	"github.com/airlock-dev/airlock/scope"
)

// Profile is one named bundle of scopes.
type Profile struct {
	Name   string        `yaml:"name"`
	Scopes []scope.Scope `yaml:"scopes"`
}

// ProfileSet is the built-in profiles with the configured ones over them.
func (c *Config) ProfileSet() (scope.Profiles, error) {
	out := scope.Builtin()
	for i, p := range c.Profiles {
		set, err := scope.Parse(p.Scopes)
		if err != nil {
			return nil, fmt.Errorf("profiles[%d] (%s): %v", i, p.Name, err)
		}
		out[p.Name] = set
	}
	return out, nil
}
