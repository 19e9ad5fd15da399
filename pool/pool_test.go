package pool

import "testing"

// A template user that is root in any spelling is refused.
func TestParseUserRefusesRoot(t *testing.T) {
	for _, u := range []string{"0", "0:0", "00:00", "0:10001", "10001:0", "000:1", "root", "root:root", "10001:root",
		"toor:10001", "-1:10001", "+0:1", " 0:1", "1:2:3", "", ":", "10001", "4294967296:1"} {
		if _, _, err := ParseUser(u); err == nil {
			t.Errorf("ParseUser(%q) accepted it", u)
		}
	}
	if uid, gid, err := ParseUser("10001:10002"); err != nil || uid != 10001 || gid != 10002 {
		t.Fatalf("ParseUser(10001:10002) = %d %d %v", uid, gid, err)
	}
}
