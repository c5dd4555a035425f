package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi"
)

// In a cluster, the handle's host_lost and resumed show as notices under
// the retry's countdown, which goes on: the prompt waits out its backoff
// on whichever node takes the session over.
func TestModelHostLostAndResumed(t *testing.T) {
	h := newHarness(t)
	h.prompt("survive a crash")
	h.retryStart(1, 10, 20*time.Second)
	h.event(musepi.HostLost{Member: "127.0.0.1:7002"})
	h.event(musepi.Resumed{Member: "127.0.0.1:7003"})
	v := h.view()
	lost := strings.Index(v, "⚠ Host 127.0.0.1:7002 lost: waiting for another node to take the session over")
	resumed := strings.Index(v, "↻ Resumed on 127.0.0.1:7003")
	if lost < 0 || resumed < lost {
		t.Errorf("want the host_lost notice, then the resumed one:\n%s", v)
	}
	if got := h.statusLine(); got != "Retrying (1/10) in 20s… (esc to cancel)" {
		t.Errorf("status line %q, want the retry's countdown still", got)
	}
}
