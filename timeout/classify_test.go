package timeout

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzFlag: the query scan reads a flag as apimachinery would from
// url.ParseQuery's map: the first value, present and not "0" or "false".
func FuzzFlag(f *testing.F) {
	for _, q := range []string{
		"", "watch", "watch=", "watch=1", "watch=0", "watch=False", "limit=5&watch=true",
		"wat%63h=1", "watch=%zz", "watch=%zz&watch=1", "watch=1;", "watch=false;x=1&watch=1",
		"watch=false&watch=true", "watch=+", "watch=tr%75e", "%zz=1&watch=1", "a=1&&watch=1",
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw)
		want := false
		if v, ok := q["watch"]; ok && len(v) > 0 {
			want = v[0] != "0" && !strings.EqualFold(v[0], "false")
		}
		if got := flag(raw, "watch"); got != want {
			t.Errorf("flag(%q) = %v, url.ParseQuery says %v", raw, got, want)
		}
	})
}
