package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/internal/hosting"
)

// onlySystem is a runtime of which a test needs its actor system only.
type onlySystem struct {
	hosting.Runtime
	system *actor.ActorSystem
}

func (r onlySystem) System() *actor.ActorSystem { return r.system }

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
			r := &remoteSession{node: &clusterNode{rt: onlySystem{system: system}}, pending: map[*pendingPrompt]struct{}{}}
			p := &pendingPrompt{r: r, to: actor.NewPID("127.0.0.1:7003", "session"), incarnations: []string{"n3-a"},
				goneSince: tc.goneSince, reply: actor.NewFuture(system, -1).PID()}
			r.pending[p] = struct{}{}
			r.audit(t0, grace, func(ids []string) bool {
				return slices.ContainsFunc(ids, func(id string) bool { return slices.Contains(tc.listed, id) })
			})
			_, waiting := r.pending[p]
			if p.lost != tc.lost || waiting == tc.lost || !p.goneSince.Equal(tc.wantSince) {
				t.Errorf("lost %t, still waiting %t, gone since %v; want lost %t, gone since %v", p.lost, waiting, p.goneSince, tc.lost, tc.wantSince)
			}
		})
	}
}
