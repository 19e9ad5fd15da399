package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// flagsOf are the flags a command's usage names, for completion.
func flagsOf(c command) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range regexp.MustCompile(`(?:^|[\s\[(|])(--?[a-z][a-z0-9-]*)`).FindAllStringSubmatch(c.usage, -1) {
		if !seen[f[1]] {
			seen[f[1]] = true
			out = append(out, f[1])
		}
	}
	return append(out, "--help")
}

// cmdCompletion prints a completion script for bash or zsh: command names, their subcommands,
// their flags, lease ids where a command takes one (from `airlock leases`), and snapshot names
// after --from and in `airlock snapshots` (from its listing: named ones whose name is one word;
// ids hold a ':', which bash splits words at).
func cmdCompletion(args []string) int {
	if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh") {
		fmt.Fprint(os.Stderr, commandUsage(find("completion")))
		return 2
	}
	var names []string
	var cases strings.Builder
	for _, c := range commands {
		names = append(names, c.name)
		words := append(slices.Clone(c.subs), flagsOf(c)...)
		fmt.Fprintf(&cases, "\t%s) words=%q ;;\n", c.name, strings.Join(words, " "))
	}
	body := fmt.Sprintf(`_airlock_words() {
	# $1: the command; prints what may follow it.
	local words=""
	case "$1" in
%s	esac
	echo "$words"
}
_airlock_leases() { airlock leases 2>/dev/null | awk '{print $1}'; }
_airlock_snapshots() { airlock snapshots 2>/dev/null | awk '$2 != "-" && $2 !~ /^"/ {print $2}'; }
# $1: the command; prints the ids or names it takes.
_airlock_refs() {
	case "$1" in
	snapshots) _airlock_snapshots ;;
	*) _airlock_leases ;;
	esac
}
`, cases.String())
	if args[0] == "bash" {
		fmt.Printf(`# bash completion for airlock: source <(airlock completion bash)
%s_airlock() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W %q -- "$cur"))
		return
	fi
	if [ "$prev" = "--from" ]; then
		COMPREPLY=($(compgen -W "$(_airlock_snapshots)" -- "$cur"))
		return
	fi
	local words
	words=$(_airlock_words "${COMP_WORDS[1]}")
	case "$cur" in
	-*) COMPREPLY=($(compgen -W "$words" -- "$cur")) ;;
	*) COMPREPLY=($(compgen -W "$words $(_airlock_refs "${COMP_WORDS[1]}")" -- "$cur")) ;;
	esac
}
complete -F _airlock airlock
`, body, strings.Join(names, " "))
		return 0
	}
	fmt.Printf(`#compdef airlock
# zsh completion for airlock: airlock completion zsh > "${fpath[1]}/_airlock" (or source it)
%s_airlock() {
	if (( CURRENT == 2 )); then
		compadd -- %s
		return
	fi
	if [[ ${words[CURRENT-1]} == --from ]]; then
		compadd -- $(_airlock_snapshots)
		return
	fi
	local -a next
	next=(${=$(_airlock_words "${words[2]}")})
	compadd -- $next $(_airlock_refs "${words[2]}")
}
compdef _airlock airlock
`, body, strings.Join(names, " "))
	return 0
}
