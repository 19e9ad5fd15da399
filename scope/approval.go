package scope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Approval makes a scope hold the requests it matches for a reviewer: `"approval": true` holds
// every one, `"approval": {"methods": ["POST"], "paths": ["/deploy/*"]}` only those (methods
// upper case, paths globs as a scope's).
type Approval struct {
	On      bool     `yaml:"-"` // true, or set by methods and paths
	Methods []string `yaml:"methods"`
	Paths   []string `yaml:"paths"`
}

type approvalObject struct {
	Methods []string `json:"methods,omitempty" yaml:"methods"`
	Paths   []string `json:"paths,omitempty" yaml:"paths"`
}

// UnmarshalJSON reads true, false or an object.
func (a *Approval) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch string(b) {
	case "true":
		*a = Approval{On: true}
		return nil
	case "false", "null":
		*a = Approval{}
		return nil
	}
	var o approvalObject
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return fmt.Errorf("approval: true, or an object of methods and paths: %v", err)
	}
	*a = Approval{On: true, Methods: o.Methods, Paths: o.Paths}
	return nil
}

// MarshalJSON writes true, or the object.
func (a Approval) MarshalJSON() ([]byte, error) {
	if len(a.Methods) == 0 && len(a.Paths) == 0 {
		return json.Marshal(a.On)
	}
	return json.Marshal(approvalObject{a.Methods, a.Paths})
}

// IsZero makes omitzero leave out a scope without approval.
func (a Approval) IsZero() bool { return !a.On }

// UnmarshalYAML reads true, false or a mapping (a profile in the config).
func (a *Approval) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var on bool
		if err := n.Decode(&on); err != nil {
			return errors.New("approval: true, false, or methods and paths")
		}
		*a = Approval{On: on}
		return nil
	}
	var o approvalObject
	if err := n.Decode(&o); err != nil {
		return err
	}
	*a = Approval{On: true, Methods: o.Methods, Paths: o.Paths}
	return nil
}

// canonical returns a with its methods upper case (see canonicalMethods) and its paths checked.
func (a Approval) canonical() (Approval, error) {
	methods, err := canonicalMethods(a.Methods)
	if err != nil {
		return a, fmt.Errorf("approval: %v", err)
	}
	a.Methods = methods
	if err := checkGlobs(a.Paths); err != nil {
		return a, fmt.Errorf("approval: %v", err)
	}
	return a, nil
}

// Holds reports whether a request of method to path waits for a reviewer.
func (a Approval) Holds(method, p string) bool {
	// Methods compare without case: an upstream may read "post" as POST, and a request the
	// scope lets through on any method must not slip past its approval in lower case.
	if !a.On || len(a.Methods) > 0 && !slices.ContainsFunc(a.Methods, func(m string) bool { return strings.EqualFold(m, method) }) {
		return false
	}
	if len(a.Paths) == 0 {
		return true
	}
	for _, g := range a.Paths {
		if globMatch(g, p) {
			return true
		}
	}
	return false
}
