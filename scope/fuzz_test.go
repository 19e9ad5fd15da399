package scope

import (
	"encoding/json"
	"reflect"
	"testing"
)

func FuzzParse(f *testing.F) {
	f.Add([]byte(`[{"host":"api.github.com","methods":["GET"],"paths":["/repos/acme/*"],"credential":"gh"}]`))
	f.Add([]byte(`[{"host":"*.pythonhosted.org"},{"cidr":"8.8.8.0/24","ports":[53]}]`))
	f.Add([]byte(`[{"host":"github.com","ports":[22],"tunnel":true}]`))
	f.Add([]byte(`[{"host":"bücher.example"},{"host":"0x7f.1"},{"cidr":"::/0"}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var in []Scope
		if json.Unmarshal(data, &in) != nil {
			return
		}
		set, err := Parse(in)
		if err != nil {
			return
		}
		// Canonical form is a fixed point.
		again, err := Parse(set)
		if err != nil || !reflect.DeepEqual(again, set) {
			t.Fatalf("Parse is not idempotent: %v -> %+v -> %+v", err, set, again)
		}
		for _, s := range set {
			if s.CIDR != "" && !IsPublicPrefix(s.prefix) {
				t.Fatalf("accepted non-public cidr %s", s.CIDR)
			}
			set.Match(Request{Host: s.Host, Port: 443, Method: "GET", Path: "/a/../b"})
		}
	})
}

func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{"Example.COM.", "0x7f.1", "2130706433", "[::ffff:127.0.0.1]", "xn--bcher-kva.example", "bücher.example"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		c, err := CanonicalHost(h)
		if err != nil {
			return
		}
		c2, err := CanonicalHost(c)
		if err != nil || c2 != c {
			t.Fatalf("CanonicalHost not idempotent: %q -> %q -> %q (%v)", h, c, c2, err)
		}
	})
}
