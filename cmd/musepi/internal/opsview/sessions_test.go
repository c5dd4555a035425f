package opsview

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/session"
)

// now is the database's clock in the tests.
var now = time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)

// record is rec as the session actors store it.
func record(t *testing.T, rec session.Record) *pgstore.Record {
	t.Helper()
	b, err := proto.Marshal(rec.Wire())
	if err != nil {
		t.Fatal(err)
	}
	out := &pgstore.Record{Data: b}
	if rec.State == session.Backoff {
		out.Due = rec.SleepUntil
	}
	return out
}

func TestSessions(t *testing.T) {
	due := now.Add(2100 * time.Millisecond)
	claim := now.Add(time.Second)
	backoff := func(attempt int) session.Record {
		return session.Record{State: session.Backoff, SleepUntil: due, Chain: session.ChainRecord{Attempt: attempt, Started: true}}
	}
	lease := now.Add(11200 * time.Millisecond) // node n2#2's
	for _, tc := range []struct {
		name    string
		state   pgstore.SessionState
		members []string // the database node ids of etcd's members (nil: not read)
		want    Session
	}{
		{"never backed off, held",
			pgstore.SessionState{ID: "a", Epoch: 1, Owner: "n1#1", Held: true, OwnerLive: true, Entries: 4}, nil,
			Session{ID: "a", Epoch: 1, Owner: "n1#1", Hold: Held, Phase: "no record", Entries: 4}},
		{"settled, released",
			pgstore.SessionState{ID: "b", Epoch: 2, Owner: "n1#1", OwnerLive: true, Record: &pgstore.Record{Data: []byte{}}}, nil,
			Session{ID: "b", Epoch: 2, Owner: "n1#1", Hold: Released, Phase: "idle"}},
		{"sleeping in a backoff, its owner's lease expired, claimed",
			pgstore.SessionState{ID: "c", Epoch: 3, Owner: "n2#2", Held: true, Record: record(t, backoff(2)),
				ClaimedBy: "n1#1", ClaimUntil: claim}, nil,
			Session{ID: "c", Epoch: 3, Owner: "n2#2", Hold: Expired, Phase: "backoff: sleeping", Attempt: 2, Due: &due,
				ClaimedBy: "n1#1", ClaimUntil: &claim}},
		{"in its first backoff, a claim that ran out",
			pgstore.SessionState{ID: "d", Epoch: 1, Owner: "n1#1", Held: true, OwnerLive: true, Record: record(t, backoff(1)),
				ClaimedBy: "n2#2", ClaimUntil: now.Add(-time.Second)}, nil,
			Session{ID: "d", Epoch: 1, Owner: "n1#1", Hold: Held, Phase: "backoff: sleeping", Attempt: 1, Due: &due}},
		{"an idle record",
			pgstore.SessionState{ID: "e", Epoch: 1, Owner: "n1#1", Record: record(t, session.Record{State: session.Idle})}, nil,
			Session{ID: "e", Epoch: 1, Owner: "n1#1", Hold: Released, Phase: "idle"}},
		{"a record that does not decode",
			pgstore.SessionState{ID: "f", Record: &pgstore.Record{Data: []byte{0xff}}}, nil,
			Session{ID: "f", Hold: Released, Phase: "unreadable record: session record: proto: cannot parse invalid wire-format data"}},
		{"held by a member",
			pgstore.SessionState{ID: "g", Epoch: 1, Owner: "n2#2", Held: true, OwnerLive: true}, []string{"n1#1", "n2#2"},
			Session{ID: "g", Epoch: 1, Owner: "n2#2", Hold: Held, Phase: "no record"}},
		{"its owner left etcd, its lease runs on",
			pgstore.SessionState{ID: "h", Epoch: 3, Owner: "n2#2", Held: true, OwnerLive: true, Record: record(t, backoff(1))}, []string{"n1#1"},
			Session{ID: "h", Epoch: 3, Owner: "n2#2", Hold: OwnerLeft, ClaimableAt: &lease, Phase: "backoff: sleeping", Attempt: 1, Due: &due}},
		{"its owner left etcd, its lease ran out",
			pgstore.SessionState{ID: "i", Epoch: 3, Owner: "n3#3", Held: true}, []string{"n1#1"},
			Session{ID: "i", Epoch: 3, Owner: "n3#3", Hold: Expired, Phase: "no record"}},
		{"its owner not in etcd, which was not read",
			pgstore.SessionState{ID: "j", Epoch: 1, Owner: "n2#2", Held: true, OwnerLive: true}, nil,
			Session{ID: "j", Epoch: 1, Owner: "n2#2", Hold: Held, Phase: "no record"}},
		{"released by an owner that left",
			pgstore.SessionState{ID: "k", Epoch: 1, Owner: "n2#2", OwnerLive: true}, []string{},
			Session{ID: "k", Epoch: 1, Owner: "n2#2", Hold: Released, Phase: "no record"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := &pgstore.Snapshot{Now: now, Sessions: []pgstore.SessionState{tc.state},
				Nodes: []pgstore.NodeLease{{Node: "n1#1", LeaseUntil: now.Add(time.Second), Live: true}, {Node: "n2#2", LeaseUntil: lease, Live: true}}}
			got := Sessions(snap, tc.members)
			if len(got) != 1 || !equalSession(got[0], tc.want) {
				t.Errorf("Sessions = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// equalSession compares Sessions, their times by instant, their phases
// with protobuf's randomised spaces in errors as plain ones.
func equalSession(a, b Session) bool {
	a.Phase = strings.ReplaceAll(a.Phase, "\u00a0", " ")
	same := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	if !same(a.Due, b.Due) || !same(a.ClaimUntil, b.ClaimUntil) || !same(a.ClaimableAt, b.ClaimableAt) {
		return false
	}
	a.Due, b.Due, a.ClaimUntil, b.ClaimUntil, a.ClaimableAt, b.ClaimableAt = nil, nil, nil, nil, nil, nil
	return a == b
}

func TestWriteSessions(t *testing.T) {
	due, late, claimable := now.Add(2140*time.Millisecond), now.Add(-95*time.Second), now.Add(11230*time.Millisecond)
	var buf bytes.Buffer
	err := WriteSessions(&buf, []Session{
		{ID: "a", Owner: "node1#3f2a9c1b0d4e", Epoch: 1, Hold: Held, Phase: "no record", Entries: 4},
		{ID: "s-2", Owner: "node2#0a1b2c3d4e5f", Epoch: 12, Hold: Expired, Phase: "backoff: sleeping", Attempt: 2, Due: &due, Entries: 7},
		{ID: "s-3", Owner: "node1#3f2a9c1b0d4e", Epoch: 2, Hold: Released, Phase: "backoff: awaiting_budget", Attempt: 1, Due: &late, Entries: 3},
		{ID: "new", Hold: Released, Phase: "no record"},
		{ID: "left", Owner: "node3#5e6f7a8b9c0d", Epoch: 2, Hold: OwnerLeft, ClaimableAt: &claimable, Phase: "backoff: sleeping", Attempt: 1, Due: &due, Entries: 3},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := `
SESSION  OWNER               EPOCH  HOLD                            PHASE                     ATTEMPT  DUE                                   ENTRIES
a        node1#3f2a9c1b0d4e  1      held                            no record                 -        -                                     4
s-2      node2#0a1b2c3d4e5f  12     expired                         backoff: sleeping         2        2025-03-04T10:00:02.140Z (in 2.1s)    7
s-3      node1#3f2a9c1b0d4e  2      released                        backoff: awaiting_budget  1        2025-03-04T09:58:25.000Z (1m35s ago)  3
new      -                   0      released                        no record                 -        -                                     0
left     node3#5e6f7a8b9c0d  2      owner left, claimable in 11.2s  backoff: sleeping         1        2025-03-04T10:00:02.140Z (in 2.1s)    3
`
	if got := buf.String(); got != strings.TrimPrefix(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
