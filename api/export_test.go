package api

// Held returns how many call slots (streams false) or stream slots identity holds on s
// ("tenant:acme", "reviewer:secops"): what a test waits on without taking a slot itself,
// since a call made to see the slots held would compete for them.
func Held(s *Server, streams bool, identity string) int {
	if streams {
		return s.streams.Held(identity)
	}
	return s.calls.Held(identity)
}
