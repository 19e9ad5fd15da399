package rule

import "testing"

// Rule names are metric labels and saved filters: they are distinct, lower-case words.
func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range All {
		s := r.String()
		if s == "" || seen[s] || !r.Known() {
			t.Fatalf("rule %q is empty, repeated or unknown", s)
		}
		seen[s] = true
		for _, c := range s {
			if !(c >= 'a' && c <= 'z' || c == '-') {
				t.Fatalf("rule %q holds %q", s, c)
			}
		}
	}
	if Rule("made-up").Known() {
		t.Fatal("an unknown rule is Known")
	}
}
