package pool

import (
	"testing"
	"time"
)

// TestRoomUnderMaxTotalAndBudget checks what the refill and a cold start may make: max_total
// counts warm, leased, pending and creating sandboxes; the memory budget counts those of every
// template, and keeps room for the floors other templates have not reached yet.
func TestRoomUnderMaxTotalAndBudget(t *testing.T) {
	tmpl := func(name string, floor int, mb int64) Template {
		return Template{Name: name, Image: "x", User: "10001:10001", Workdir: "/workspace", CPUs: 1, MemoryMB: mb, Pids: 64,
			WorkspaceMB: 16, TmpMB: 16, NoFile: 1024, NProc: 1024, Runtime: "runc", MinWarm: floor, MaxWarm: 8, MaxTotal: 6,
			DefaultTTL: time.Minute, MaxTTL: time.Hour}
	}
	a, b := tmpl("a", 0, 256), tmpl("b", 2, 512)
	m, err := New(Config{Templates: []Template{a, b}, MemoryBudgetMB: 4096})
	if err != nil {
		t.Fatal(err)
	}
	counts := func(aw, al, bw, bl int) census {
		return census{warm: map[string]int{"a": aw, "b": bw}, leased: map[string]int{"a": al, "b": bl}, pending: map[string]int{}}
	}
	cases := []struct {
		name                string
		c                   census
		creatingA, pendingA int
		creatingB           int
		want                int
	}{
		// b lacks its two floor sandboxes (1 GiB): a may use 4096 - 1024 = 3072 MiB, 12 of
		// 256, but max_total (6) is lower.
		{"max_total first", counts(0, 0, 0, 0), 0, 0, 0, 6},
		{"max_total counts warm, leased, creating and pending", counts(1, 2, 0, 0), 1, 1, 0, 1},
		// b has 6 leased (3 GiB) and still lacks its floor of 2 warm (1 GiB): nothing is left.
		{"the budget keeps b's floor", counts(0, 0, 0, 6), 0, 0, 0, 0},
		// b has 5 leased and its floor being made (3.5 GiB): 512 MiB left, counted once.
		{"a floor being made counts once", counts(0, 0, 0, 5), 0, 0, 2, 2},
		// b's floor is warm and 4 are leased (3 GiB): 1 GiB left, 4 of a.
		{"room under the budget", counts(0, 0, 2, 4), 0, 0, 0, 4},
	}
	for _, tc := range cases {
		m.creating["a"], tc.c.pending["a"], m.creating["b"] = tc.creatingA, tc.pendingA, tc.creatingB
		if got := m.roomLocked(a, tc.c); got != tc.want {
			t.Errorf("%s: room %d, want %d", tc.name, got, tc.want)
		}
	}
}
