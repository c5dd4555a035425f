package credentials

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1_000_000, 0)

// A step is one thing that happens to a selector, at t0 plus at:
// "select S", "limited S [KEY] FOR", "keep S KEY", "forget S" or
// "block KEY FOR"; want is what it answers ("" for keep, forget, block).
type step struct {
	at   time.Duration
	do   string
	want string
}

func TestSelector(t *testing.T) {
	ab := []Key{{Name: "A"}, {Name: "B"}}
	for _, tc := range []struct {
		name       string
		keys       []Key
		autoRedeem bool
		steps      []step
	}{
		{"no keys: none chosen, no switch", nil, false, []step{
			{0, "select s1", ""},
			{0, "limited s1 1m", "no switch"},
		}},
		{"a session keeps its key; new sessions take the keys in turn", ab, false, []step{
			{0, "select s1", "A"},
			{0, "select s2", "B"},
			{0, "select s3", "A"},
			{0, "select s1", "A"},
			{0, "select s2", "B"},
		}},
		{"a usage limit blocks the key and moves the session to a free one", ab, false, []step{
			{0, "select s1", "A"},
			{0, "limited s1 1m", "A blocked until +1m0s, switched to B"},
			{0, "select s1", "B"},
			{0, "select s2", "B"}, // A is blocked
		}},
		{"the key a session names is the one blocked (an activation that moved knows none)", []Key{{Name: "A"}, {Name: "B"}, {Name: "C"}}, false, []step{
			{0, "limited s1 C 1m", "C blocked until +1m0s, switched to A"},
		}},
		{"a name not of the provider: the first key", ab, false, []step{
			{0, "limited s1 Z 1m", "A blocked until +1m0s, switched to B"},
		}},
		{"every key blocked: no switch, and when the first sibling frees", ab, false, []step{
			{0, "select s1", "A"},
			{0, "select s2", "B"},
			{0, "limited s2 2m", "B blocked until +2m0s, switched to A"},
			{0, "limited s1 1m", "A blocked until +1m0s, retry at +2m0s"},
		}},
		{"none free: a session takes the key that frees first", ab, false, []step{
			{0, "block A 2m", ""},
			{0, "block B 1m", ""},
			{0, "select s1", "B"},
			{90 * time.Second, "select s1", "B"},
		}},
		{"a blocked key is the session's again once free, unless it moved", ab, false, []step{
			{0, "select s1", "A"},
			{0, "block A 1m", ""},
			{0, "select s1", "B"},
			{2 * time.Minute, "select s1", "B"},
		}},
		{"auto-redeem spends a banked reset when no sibling is free", []Key{{Name: "A"}, {Name: "B", BankedResets: 1}}, true, []step{
			{0, "select s1", "A"},
			{0, "block B 5m", ""},
			{0, "limited s1 1m", "A blocked until +1m0s, switched to B (redeemed)"},
			{0, "select s2", "B"},
			{0, "limited s2 1m", "B blocked until +1m0s, retry at +1m0s"}, // its one reset spent
		}},
		{"without auto-redeem a banked reset stays", []Key{{Name: "A", BankedResets: 1}}, false, []step{
			{0, "limited s1 1m", "A blocked until +1m0s"},
		}},
		{"a negative block is none", ab, false, []step{
			{0, "limited s1 -1m", "A blocked until +0s, switched to B"},
			{0, "select s2", "A"},
		}},
		{"keep: pacing granted the session another key", ab, false, []step{
			{0, "select s1", "A"},
			{0, "keep s1 B", ""},
			{0, "select s1", "B"},
			{0, "keep s1 Z", ""}, // not a key: nothing changes
			{0, "select s1", "B"},
		}},
		{"forget: a session gone holds no key", ab, false, []step{
			{0, "select s1", "A"},
			{0, "forget s1", ""},
			{0, "select s1", "B"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var blocks blockLog
			s := New(tc.keys, tc.autoRedeem, &blocks)
			for _, st := range tc.steps {
				if got := do(s, t0.Add(st.at), st.do); got != st.want {
					t.Errorf("at +%s %s: got %q, want %q", st.at, st.do, got, st.want)
				}
			}
			for i := range s.Len() {
				if name := s.keys[i].Name; blocks.until[name] != s.BlockedUntil(i) {
					t.Errorf("the blocker has %s blocked until %v; the selector %v", name, blocks.until[name], s.BlockedUntil(i))
				}
			}
		})
	}
}

// do runs one step and renders its answer.
func do(s *Selector, now time.Time, cmd string) string {
	f := strings.Fields(cmd)
	switch f[0] {
	case "select":
		return s.Select(now, f[1])
	case "keep":
		s.Keep(f[1], f[2])
	case "forget":
		s.Forget(f[1])
	case "block":
		d, _ := time.ParseDuration(f[2])
		s.Block(f[1], now.Add(d))
	case "limited":
		name := ""
		if len(f) == 4 {
			name = f[2]
		}
		d, _ := time.ParseDuration(f[len(f)-1])
		return render(s.Limited(now, f[1], name, d), now)
	}
	return ""
}

func render(sw Switch, now time.Time) string {
	if sw.Blocked == "" {
		return "no switch"
	}
	out := fmt.Sprintf("%s blocked until +%s", sw.Blocked, sw.BlockedUntil.Sub(now))
	switch {
	case sw.Redeemed:
		out += ", switched to " + sw.Credential + " (redeemed)"
	case sw.Switched:
		out += ", switched to " + sw.Credential
	case !sw.RetryAt.IsZero():
		out += ", retry at +" + sw.RetryAt.Sub(now).String()
	}
	return out
}

// blockLog is a Blocker that keeps the last block of each key.
type blockLog struct{ until map[string]time.Time }

func (b *blockLog) Block(name string, until time.Time) {
	if b.until == nil {
		b.until = map[string]time.Time{}
	}
	b.until[name] = until
}
