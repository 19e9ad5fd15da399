package config

import (
	"fmt"
	"strings"

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

// validateProfiles checks each profile has a name of its own and scopes that parse.
func validateProfiles(ps []Profile, bad badFunc) {
	names := map[string]bool{}
	for i, p := range ps {
		switch {
		case p.Name == "" || strings.ContainsAny(p.Name, "@, \t"):
			bad(fmt.Sprintf("profiles[%d].name", i), "required, without @, commas or spaces")
		case names[p.Name]:
			bad(fmt.Sprintf("profiles[%d].name", i), "%q is defined twice", p.Name)
		case len(p.Scopes) == 0:
			bad(fmt.Sprintf("profiles[%d].scopes", i), "required")
		}
		names[p.Name] = true
		if _, err := scope.Parse(p.Scopes); err != nil {
			bad(fmt.Sprintf("profiles[%d].scopes", i), "%v", err)
		}
	}
}
