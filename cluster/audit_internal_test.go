package cluster

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/internal/hosting"
	"github.com/musepi/musepi/messages"
)

// onlySystem is a runtime of which a test needs its actor system only.
type onlySystem struct {
	hosting.Runtime[*musepi.Session]
	system *actor.ActorSystem
}

func (r onlySystem) System() *actor.ActorSystem { return r.system }

// AllEvents are nobody's: a fan-out without subscribers.
func (r onlySystem) AllEvents() *actors.Fanout { return &actors.Fanout{} }

// toldHandle is a handle of which a test needs its id and what it
// published to its subscribers.
type toldHandle struct {
	hosting.Handle[*musepi.Session]
	mu   sync.Mutex
	told []*messages.SessionEvent
}

func (h *toldHandle) ID() string { return "s" }

func (h *toldHandle) Publish(ev *messages.SessionEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.told = append(h.told, ev)
}

// events are what h published, as "type member" ("type" for events
// without a member).
func (h *toldHandle) events() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, ev := range h.told {
		switch e := ev.GetEvent().(type) {
		case *messages.SessionEvent_HostLost:
			out = append(out, "host_lost "+e.HostLost.GetMember())
		case *messages.SessionEvent_Resumed:
			out = append(out, "resumed "+e.Resumed.GetMember())
		default:
			out = append(out, string(ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("event")).Name()))
		}
	}
	return out
}

// newToldSession is a handle, with no activation, whose published events
// h keeps.
func newToldSession(system *actor.ActorSystem) (*remoteSession, *toldHandle) {
	h := &toldHandle{}
	return &remoteSession{s: h, node: &clusterNode{rt: onlySystem{system: system}}, pending: map[*pendingPrompt]struct{}{}}, h
}

// listedOnly is a member list of ids, for audit.
func listedOnly(ids ...string) func([]string) bool {
	return func(of []string) bool {
		return slices.ContainsFunc(of, func(id string) bool { return slices.Contains(ids, id) })
	}
}

// never is a membership that says no member left gracefully.
func never([]string) bool { return false }

// A handle carries on a waiting prompt once none of the members that were
// at its activation's address when it was sent has been listed for the
// grace period: a member listed again in the meantime (a slow topology)
// starts the wait afresh, and a node that came back on its address under
// a new id does not count.
func TestAuditCarriesOnPromptsOfLeftMembers(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	const grace = 4 * time.Second
	tests := []struct {
		name      string
		listed    []string  // the member ids listed at the audit
		goneSince time.Time // as an earlier audit left it
		lost      bool
		wantSince time.Time
	}{
		{"its member listed", []string{"n3-a"}, time.Time{}, false, time.Time{}},
		{"its member listed again", []string{"n3-a"}, t0.Add(-time.Second), false, time.Time{}},
		{"first seen gone", []string{"n1"}, time.Time{}, false, t0},
		{"gone within the grace", []string{"n1"}, t0.Add(-grace + time.Millisecond), false, t0.Add(-grace + time.Millisecond)},
		{"gone for the grace", []string{"n1"}, t0.Add(-grace), true, t0.Add(-grace)},
		{"back on its address as a new member", []string{"n3-b"}, t0.Add(-grace), true, t0.Add(-grace)},
	}
	system := actor.NewActorSystem()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newToldSession(system)
			p := &pendingPrompt{r: r, to: actor.NewPID("127.0.0.1:7003", "session"), incarnations: []string{"n3-a"},
				goneSince: tc.goneSince, reply: actor.NewFuture(system, -1).PID()}
			r.pending[p] = struct{}{}
			r.audit(t0, grace, listedOnly(tc.listed...), never)
			_, waiting := r.pending[p]
			if p.lost != tc.lost || waiting == tc.lost || !p.goneSince.Equal(tc.wantSince) {
				t.Errorf("lost %t, still waiting %t, gone since %v; want lost %t, gone since %v", p.lost, waiting, p.goneSince, tc.lost, tc.wantSince)
			}
		})
	}
}

// A handle tells its subscribers host_lost once per loss of the host its
// prompts wait on, at the first audit that finds the host still gone (not
// for a graceful leave, which hands the session over), and resumed when
// the host is listed again.
func TestAuditTellsHostLost(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	const grace = 10 * time.Second
	const host = "127.0.0.1:7003"
	tests := []struct {
		name     string
		graceful bool
		audits   [][]string // the member ids listed at each audit, one second apart
		want     string
	}{
		{"listed", false, [][]string{{"n3-a"}, {"n3-a"}}, ""},
		{"gone at one audit only", false, [][]string{{"n3-a"}, {"n1"}, {"n3-a"}}, ""},
		{"lost", false, [][]string{{"n1"}, {"n1"}, {"n1"}, {"n1"}}, "host_lost " + host},
		{"lost, then listed again", false, [][]string{{"n1"}, {"n1"}, {"n3-a"}, {"n3-a"}}, "host_lost " + host + ", resumed " + host},
		{"lost twice", false, [][]string{{"n1"}, {"n1"}, {"n3-a"}, {"n1"}, {"n1"}}, "host_lost " + host + ", resumed " + host + ", host_lost " + host},
		{"left gracefully", true, [][]string{{"n1"}, {"n1"}, {"n1"}}, ""},
	}
	system := actor.NewActorSystem()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, h := newToldSession(system)
			for range 2 { // two prompts on the same host: one loss
				p := &pendingPrompt{r: r, to: actor.NewPID(host, "session"), incarnations: []string{"n3-a"}, reply: actor.NewFuture(system, -1).PID()}
				r.pending[p] = struct{}{}
			}
			for i, listed := range tc.audits {
				r.audit(t0.Add(time.Duration(i)*time.Second), grace, listedOnly(listed...), func([]string) bool { return tc.graceful })
			}
			if got := strings.Join(h.events(), ", "); got != tc.want {
				t.Errorf("told %q, want %q", got, tc.want)
			}
			for _, ev := range h.told {
				if ev.GetSeq() != 0 || ev.GetSessionId() != "s" || ev.GetTimeMs() == 0 {
					t.Errorf("event %v: want seq 0 (the handle's), session s, a time", ev)
				}
			}
		})
	}
}

// After a host_lost, the open that reaches the session's new activation
// tells resumed once, before the first event that activation relays (the
// events it kept of the resumed prompt come before its answer).
func TestResumedBeforeTheNewActivationsEvents(t *testing.T) {
	system := actor.NewActorSystem()
	event := &messages.SessionEvent{SessionId: "s", Seq: 4, Event: &messages.SessionEvent_AutoRetryStart{AutoRetryStart: &messages.AutoRetryStart{Attempt: 2}}}
	relay := func(r *remoteSession) { (&relayProcess{r: r}).SendUserMessage(nil, event) }
	for _, tc := range []struct {
		name  string
		lost  string
		steps func(r *remoteSession)
		want  string
	}{
		{"an event, then the answer", "127.0.0.1:7003", func(r *remoteSession) { relay(r); r.reachedLocked() }, "resumed 127.0.0.1:7001, auto_retry_start"},
		{"the answer, then an event", "127.0.0.1:7003", func(r *remoteSession) { r.reachedLocked(); relay(r) }, "resumed 127.0.0.1:7001, auto_retry_start"},
		{"no host lost", "", func(r *remoteSession) { relay(r); r.reachedLocked() }, "auto_retry_start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, h := newToldSession(system)
			r.lost = tc.lost
			if r.lost != "" { // as openLocked asks the activation at 127.0.0.1:7001
				addr := "127.0.0.1:7001"
				r.resume.Store(&addr)
			}
			tc.steps(r)
			if got := strings.Join(h.events(), ", "); got != tc.want || r.lost != "" {
				t.Errorf("told %q, lost %q after; want %q, none", got, r.lost, tc.want)
			}
			relay(r) // later events: no more resumed
			if got := strings.Join(h.events(), ", "); got != tc.want+", auto_retry_start" {
				t.Errorf("then told %q", got)
			}
		})
	}
}
