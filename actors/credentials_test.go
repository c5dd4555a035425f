package actors

import (
	"testing"
	"time"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
)

// A usage limit blocks the key the session names, even when the actor
// never gave the session a key (an activation that moved to another node
// has lost its sessions' sticky keys), and switches it to a free sibling.
func TestUsageLimitBlocksTheNamedKey(t *testing.T) {
	creds := []Credential{{Name: "A"}, {Name: "B"}, {Name: "C"}}
	for _, tc := range []struct {
		name        string
		credential  string // what the session says it used
		wantBlocked string
		wantSwitch  string
	}{
		{"named B", "B", "B", "A"},
		{"named C", "C", "C", "A"},
		{"unnamed: the first, as before", "", "A", "B"},
		{"an unknown name: the first", "Z", "A", "B"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewVirtual(time.Unix(0, 0))
			view := NewCredentialsView(creds)
			a := NewCredentialsActor(clk, creds, CredentialsPolicy{}, view)
			r := a.markLimited(&messages.MarkUsageLimitReached{SessionId: "s", BlockForMs: 60_000, Token: 1, Credential: tc.credential})
			if !r.GetSwitched() || r.GetCredential() != tc.wantSwitch {
				t.Fatalf("reply %v; want a switch to %s", r, tc.wantSwitch)
			}
			for _, c := range creds {
				if blocked := !view.Free(c.Name, clk.Now()) || a.creds[a.indexOf(c.Name)].blockedUntil.After(clk.Now()); blocked != (c.Name == tc.wantBlocked) {
					t.Errorf("key %s blocked = %v; want only %s blocked", c.Name, blocked, tc.wantBlocked)
				}
			}
		})
	}
}
