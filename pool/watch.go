package pool

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxWatchListing bounds one listing a watch prints, well under what a process's output keeps
// (ProcessOutputKept), so a reader that is a moment late still finds the whole listing.
const MaxWatchListing = 192 << 10

// WatchCmd is the command of a background process that watches the folder dir of the workspace
// ws down to depth levels (1 to 64). Every `every` it lists the folder, with ListFiles' check
// (through any symbolic link dir stays in the workspace) and format, and prints the listing
// when it differs from the one before (the first always), followed by one more NUL; a
// WatchReader reads what it prints. It ends, saying why on stderr, when dir is no longer a
// folder of the workspace or a listing would exceed MaxListEntries or MaxWatchListing. The
// watch runs in the sandbox, so a long one costs one process (and one audit record), not a
// listing through the API every second.
func WatchCmd(ws, dir string, depth int, every time.Duration) []string {
	depth = min(max(depth, 1), 64)
	secs := strconv.FormatFloat(max(every, 10*time.Millisecond).Seconds(), 'f', 3, 64)
	script := watchMark + `
t=$(mktemp -d) || exit 1; trap 'rm -rf "$t"' EXIT; trap 'exit 0' TERM INT HUP; : > "$t/old"; first=1
while :; do
	airlock_full "$1"; [ -d "$1" ] || { echo "$1 is no longer a folder" >&2; exit 2; }
	find "$1" -mindepth 1 -maxdepth "$2" -printf '` + entryFormat + `' 2>/dev/null | head -z -n "$3" > "$t/new"
	[ "$(tr -cd '\0' < "$t/new" | wc -c)" -lt "$3" ] || { echo "$1 holds more than ` + strconv.Itoa(MaxListEntries) + ` entries: watch a smaller folder" >&2; exit 3; }
	[ "$(wc -c < "$t/new")" -le ` + strconv.Itoa(MaxWatchListing) + ` ] || { echo "the listing of $1 is larger than ` + strconv.Itoa(MaxWatchListing>>10) + ` KiB: watch a smaller folder" >&2; exit 3; }
	if [ -n "$first" ] || ! cmp -s "$t/new" "$t/old"; then cat "$t/new"; printf '\0'; mv "$t/new" "$t/old"; first=; fi
	sleep "$4"
done`
	return confined(ws, script, dir, strconv.Itoa(depth), strconv.Itoa(6*(MaxListEntries+1)), secs)
}

// watchMark opens a watch's script, so the watch can be told from the lease's other processes.
const watchMark = "# airlock: a folder watch"

// IsWatch says whether cmd is a WatchCmd's.
func IsWatch(cmd []string) bool {
	return len(cmd) > 2 && cmd[0] == "sh" && cmd[1] == "-c" && strings.Contains(cmd[2], "\n"+watchMark+"\n")
}

// WatchReader reads what WatchCmd prints, as it comes. The zero value is ready.
type WatchReader struct {
	buf   []byte
	pos   int // scanned up to here
	field int // fields completed in the listing being read
	start int // where the current field starts
}

// Feed adds output and returns the listings it completed, each sorted by path.
func (w *WatchReader) Feed(b []byte) ([][]Entry, error) {
	w.buf = append(w.buf, b...)
	var out [][]Entry
	for ; w.pos < len(w.buf); w.pos++ {
		if w.buf[w.pos] != 0 {
			continue
		}
		// An empty field where an entry would start (its type is never empty) ends a listing.
		if w.field%6 == 0 && w.pos == w.start {
			es, err := parseEntries(w.buf[:w.pos])
			if err != nil {
				return out, err
			}
			out = append(out, es)
			w.buf = w.buf[w.pos+1:]
			w.pos, w.field, w.start = -1, 0, 0
			continue
		}
		w.field++
		w.start = w.pos + 1
	}
	if len(w.buf) > MaxWatchListing+4096 {
		return out, fmt.Errorf("a watch listing longer than %d bytes", MaxWatchListing)
	}
	return out, nil
}
