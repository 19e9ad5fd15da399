package slots

import (
	"errors"
	"fmt"
	"sync"
)

// Limits are the bounds of a Set.
type Limits struct {
	// Max is how many slots the node serves at once.
	Max int
	// PerIdentity is how many one identity holds at once. An identity is whoever the caller
	// says it is (a reviewer key's name, a tenant): never a session or a connection, or signing
	// in again would multiply it.
	PerIdentity int
	// Reserved, of Max, are kept for reviewers: other identities hold at most Max-Reserved
	// together, so a reviewer always finds a slot unless reviewers hold them.
	Reserved int
}

// Bound names the limit that refused a slot.
type Bound int

// Bounds.
const (
	// PerIdentity: the identity already holds Limits.PerIdentity slots.
	PerIdentity Bound = iota + 1
	// Shared: the slots open to every identity (Max-Reserved) are all held; the rest are kept
	// for reviewers.
	Shared
	// Node: all Max slots are held.
	Node
)

func (b Bound) String() string {
	switch b {
	case PerIdentity:
		return "per-identity"
	case Shared:
		return "shared"
	case Node:
		return "node"
	}
	return fmt.Sprintf("bound(%d)", int(b))
}

// ErrFull is what every refusal wraps.
var ErrFull = errors.New("no stream slot free")

// Refusal says which bound refused a slot: Held of Limit are taken.
type Refusal struct {
	Bound       Bound
	Held, Limit int
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%v: %s limit reached (%d of %d held)", ErrFull, r.Bound, r.Held, r.Limit)
}

func (r *Refusal) Unwrap() error { return ErrFull }

// Set hands out slots within its Limits. Safe for concurrent use.
type Set struct {
	limits Limits

	mu    sync.Mutex
	held  map[string]int // by identity
	all   int            // every slot held
	plain int            // slots held by identities that are not reviewers
}

// New returns a Set of l. Callers validate l (the config package does for the node's limits);
// a Max below 1 refuses every slot, a PerIdentity below 1 is Max, and a Reserved outside 0 to Max
// is clamped into it.
func New(l Limits) *Set {
	if l.PerIdentity < 1 {
		l.PerIdentity = l.Max
	}
	l.Reserved = min(max(l.Reserved, 0), max(l.Max, 0))
	return &Set{limits: l, held: map[string]int{}}
}

// Limits returns the set's bounds.
func (s *Set) Limits() Limits { return s.limits }

// Take takes a slot for identity, which may take the reserved share when it is a reviewer. The
// slot is held until release is called (once or more: later calls do nothing); a refusal is a
// *Refusal naming the bound.
func (s *Set) Take(identity string, reviewer bool) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.limits
	switch {
	case s.held[identity] >= l.PerIdentity:
		return nil, &Refusal{Bound: PerIdentity, Held: s.held[identity], Limit: l.PerIdentity}
	case s.all >= l.Max:
		return nil, &Refusal{Bound: Node, Held: s.all, Limit: l.Max}
	case !reviewer && s.plain >= l.Max-l.Reserved:
		return nil, &Refusal{Bound: Shared, Held: s.plain, Limit: l.Max - l.Reserved}
	}
	s.held[identity]++
	s.all++
	if !reviewer {
		s.plain++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.held[identity]--; s.held[identity] == 0 {
				delete(s.held, identity)
			}
			s.all--
			if !reviewer {
				s.plain--
			}
		})
	}, nil
}

// Held returns how many slots identity holds.
func (s *Set) Held(identity string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[identity]
}

// bound is the bound a refusal (a *Refusal) names; 0 for any other error.
func bound(err error) Bound {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Bound
	}
	return 0
}
