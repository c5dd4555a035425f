package actors

import (
	"testing"
	"time"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages/protocol"
)

// The model-fallback actor puts the failing model in cooldown and names
// the next chain entry out of one; with none, it says when the first of
// the role's models (primary, the one in use, the chain) comes back.
func TestFallbackNextAndFirstBack(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		cooling  map[string]time.Duration // already cooling, for so long after t0
		current  string
		cooldown time.Duration // asked for current
		to       string        // "" : no switch
		back     time.Duration // 0: NextBackMs unset
	}{
		{"the next entry out of cooldown", nil, "p/a", time.Minute, "p/b", 0},
		{"cooling entries are skipped", map[string]time.Duration{"p/b": time.Minute}, "p/a", time.Minute, "p/c", 0},
		{"all cooling: the first back", map[string]time.Duration{"p/b": 50 * time.Second, "p/c": 40 * time.Second},
			"p/a", time.Minute, "", 40 * time.Second},
		{"all cooling, the one in use first back", map[string]time.Duration{"p/b": 50 * time.Second, "p/c": 40 * time.Second},
			"p/a", 30 * time.Second, "", 30 * time.Second},
		{"from the last entry, the primary out of cooldown: no wait (it comes back at the next continue)",
			map[string]time.Duration{"p/b": 50 * time.Second}, "p/c", time.Minute, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewVirtual(t0)
			view := &CooldownView{}
			for sel, d := range tt.cooling {
				view.Set(sel, t0.Add(d))
			}
			a := NewFallbackActor(clk, "default", []string{"p/b", "p/c"}, view)
			r := a.next(&protocol.NextModelRequest{Current: tt.current, Primary: "p/a", CooldownMs: tt.cooldown.Milliseconds()})
			if r.GetSwitched() != (tt.to != "") || r.GetTo() != tt.to {
				t.Errorf("switched %v to %q, want to %q", r.GetSwitched(), r.GetTo(), tt.to)
			}
			var want int64
			if tt.back > 0 {
				want = t0.Add(tt.back).UnixMilli()
			}
			if r.GetNextBackMs() != want {
				t.Errorf("NextBackMs = %d, want %d (%v after t0)", r.GetNextBackMs(), want, tt.back)
			}
		})
	}
}
