package slots

import (
	"errors"
	"sync"
	"testing"
)

// step takes a slot (release < 0) or gives back the one step release took.
type step struct {
	who      string
	reviewer bool
	release  int
	want     Bound // 0: the slot is given
}

func take(who string, reviewer bool, want Bound) step {
	return step{who: who, reviewer: reviewer, release: -1, want: want}
}
func give(i int) step { return step{release: i} }

func TestTake(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits Limits
		steps  []step
	}{
		{"one identity never holds every slot", Limits{Max: 8, PerIdentity: 3, Reserved: 2}, []step{
			take("tenant:acme", false, 0), take("tenant:acme", false, 0), take("tenant:acme", false, 0),
			take("tenant:acme", false, PerIdentity), take("tenant:globex", false, 0),
		}},
		{"tenants fill the shared slots, a reviewer still finds one", Limits{Max: 4, PerIdentity: 2, Reserved: 2}, []step{
			take("tenant:acme", false, 0), take("tenant:acme", false, 0), take("tenant:globex", false, Shared),
			take("secops", true, 0), take("secops", true, 0), take("other-reviewer", true, Node),
		}},
		{"reviewers may take the shared slots too", Limits{Max: 3, PerIdentity: 3, Reserved: 1}, []step{
			take("secops", true, 0), take("secops", true, 0), take("tenant:acme", false, 0), take("tenant:acme", false, Node),
		}},
		{"a slot given back is free again, and giving it twice frees one", Limits{Max: 2, PerIdentity: 2}, []step{
			take("tenant:acme", false, 0), take("tenant:acme", false, 0), take("tenant:globex", false, Node),
			give(0), give(0), take("tenant:globex", false, 0), take("tenant:globex", false, Node),
		}},
		{"every slot kept for reviewers", Limits{Max: 2, PerIdentity: 1, Reserved: 2}, []step{
			take("tenant:acme", false, Shared), take("secops", true, 0), take("secops", true, PerIdentity),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.limits)
			releases := map[int]func(){}
			for i, st := range tc.steps {
				if st.release >= 0 {
					releases[st.release]()
					continue
				}
				release, err := s.Take(st.who, st.reviewer)
				var refusal *Refusal
				switch {
				case st.want == 0 && err != nil:
					t.Fatalf("step %d: %s was refused: %v", i, st.who, err)
				case st.want == 0:
					releases[i] = release
				case !errors.As(err, &refusal) || !errors.Is(err, ErrFull):
					t.Fatalf("step %d: %s was given a slot (err %v); want the %s bound to refuse", i, st.who, err, st.want)
				case refusal.Bound != st.want:
					t.Fatalf("step %d: %s refused by the %s bound (%v); want %s", i, st.who, refusal.Bound, err, st.want)
				}
			}
		})
	}
}

// Under concurrent takes the bounds hold exactly.
func TestTakeConcurrent(t *testing.T) {
	s := New(Limits{Max: 10, PerIdentity: 4, Reserved: 3})
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := []string{"a", "b", "c"}[i%3]
			if _, err := s.Take(who, false); err == nil {
				mu.Lock()
				got[who]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	total := 0
	for who, n := range got {
		if n > 4 || s.Held(who) != n {
			t.Errorf("%s holds %d (counted %d); at most 4", who, s.Held(who), n)
		}
		total += n
	}
	if total != 7 {
		t.Errorf("identities that are not reviewers hold %d slots; want the 7 not kept for reviewers", total)
	}
}
