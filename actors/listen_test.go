package actors

import (
	"log/slog"
	"testing"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
)

// A session's cached answer to "does anyone subscribe" follows every
// subscription made and ended, on the session's fan-out and the
// runtime-wide one, whoever's session made it.
func TestListenCacheFollowsSubscriptions(t *testing.T) {
	clk, log := clock.Real{}, slog.New(slog.DiscardHandler)
	sessions := NewFanoutConfig(clk, log, 0)
	var mine, other Fanout
	mine.Init(sessions)
	other.Init(sessions)
	all := NewFanout(clk, log, 0)
	var c, noAll listenCache
	c.watch(&mine, all)
	subscribe := func(f *Fanout) func() { return f.Subscribe(func(*messages.SessionEvent) {}) }
	steps := []struct {
		name string
		do   func()
		want bool
	}{
		{"no subscriber", func() {}, false},
		{"another session's subscriber", func() { subscribe(&other) }, false},
		{"the session's subscriber", func() { defer subscribe(&mine)() }, false}, // made and ended
		{"subscribed to the session", func() { subscribe(&mine) }, true},
		{"still subscribed", func() {}, true},
	}
	for _, s := range steps {
		s.do()
		if got := c.listened(); got != s.want {
			t.Fatalf("%s: listened = %v, want %v", s.name, got, s.want)
		}
	}
	var quiet Fanout // a session no one subscribes to, but the runtime-wide subscribers
	quiet.Init(sessions)
	var d listenCache
	d.watch(&quiet, all)
	noAll.watch(&quiet, nil)
	for _, s := range []struct {
		name string
		do   func()
		want bool
	}{
		{"no runtime-wide subscriber", func() {}, false},
		{"a runtime-wide subscriber", func() { subscribe(all) }, true},
	} {
		s.do()
		if got := d.listened(); got != s.want {
			t.Fatalf("%s: listened = %v, want %v", s.name, got, s.want)
		}
	}
	if noAll.listened() {
		t.Fatal("without runtime-wide fan-out: listened")
	}
}
