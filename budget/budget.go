// Package budget bounds what one lease may send upstream: how many requests, how many bytes. The
// operator sets a default per lease, a task token may only narrow it, and the gateway holds each
// lease to the result (request heads and bodies, CONNECTs, upgraded streams and tunnels alike).
package budget

// Budget bounds what one lease may send upstream; zero fields mean no limit. A token's budget can
// only narrow the operator's.
type Budget struct {
	Requests int64 `json:"requests,omitempty" yaml:"requests"`
	BytesUp  int64 `json:"bytes_up,omitempty" yaml:"bytes_up"`
}

// Narrow returns the tighter of b and o, field by field.
func (b Budget) Narrow(o Budget) Budget {
	pick := func(x, y int64) int64 {
		switch {
		case x == 0:
			return y
		case y == 0:
			return x
		}
		return min(x, y)
	}
	return Budget{Requests: pick(b.Requests, o.Requests), BytesUp: pick(b.BytesUp, o.BytesUp)}
}
