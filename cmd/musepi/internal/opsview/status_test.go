package opsview

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cluster/pgstore"
)

// member is an etcd member key at addr.
func member(addr, storeNode, viewURL string, client bool) cluster.EtcdMember {
	return cluster.EtcdMember{Key: "/musepi/c/id-" + addr, ID: "id-" + addr, Address: addr,
		Info: cluster.MemberInfo{StoreNode: storeNode, ViewURL: viewURL, Client: client}}
}

// view is a node's view of members.
func view(addr string, members ...string) ViewRead {
	return ViewRead{View: &NodeView{Address: addr, Members: members}}
}

// TestBuildStatus: each member's view compared with etcd's list, the
// verdict, and the leases with their members and sessions.
func TestBuildStatus(t *testing.T) {
	a, b, c, rpc := "10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001", "10.0.0.1:41234"
	members := []cluster.EtcdMember{
		member(a, "a#1", "http://10.0.0.1:9100/cluster/members", false),
		member(b, "b#1", "http://10.0.0.2:9100/cluster/members", false),
		member(c, "c#1", "http://10.0.0.3:9100/cluster/members", false),
		member(rpc, "a-rpc#1", "", true),
	}
	all := []string{a, b, c, rpc}
	for _, tc := range []struct {
		name   string
		views  map[string]ViewRead
		agree  bool
		unread int
		want   map[string]string // member's view, as the table says it
	}{
		{"every view agrees", map[string]ViewRead{a: view(a, all...), b: view(b, rpc, c, b, a), c: view(c, all...)}, true, 0,
			map[string]string{a: "agrees", b: "agrees", c: "agrees", rpc: "not read: a client serves no view"}},
		{"one view misses a member and has one etcd has not", map[string]ViewRead{a: view(a, all...),
			b: view(b, a, b, rpc, "10.0.0.9:7001"), c: view(c, all...)}, false, 0,
			map[string]string{a: "agrees", b: "DISAGREES: does not see 10.0.0.3:7001; sees 10.0.0.9:7001 (not in etcd)", c: "agrees"}},
		{"views not read", map[string]ViewRead{a: view(a, all...), b: {Err: errors.New("context deadline exceeded")},
			c: view(b, all...)}, true, 2,
			map[string]string{a: "agrees", b: "not read: context deadline exceeded",
				c: "not read: http://10.0.0.3:9100/cluster/members serves the view of 10.0.0.2:7001"}},
		{"a node serves none, one was not asked", map[string]ViewRead{a: view(a, all...)}, true, 2,
			map[string]string{a: "agrees", b: "not read: not asked", c: "not read: not asked"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := BuildStatus(StatusInput{Cluster: "c", Membership: "etcd", Members: members, Views: tc.views})
			if s.Agree != tc.agree || s.Unread != tc.unread {
				t.Errorf("agree %t, unread %d; want %t, %d", s.Agree, s.Unread, tc.agree, tc.unread)
			}
			for _, m := range s.Members {
				if want, ok := tc.want[m.Address]; ok && m.view() != want {
					t.Errorf("%s: view %q, want %q", m.Address, m.view(), want)
				}
			}
		})
	}

	t.Run("leases", func(t *testing.T) {
		until := now.Add(time.Second)
		s := BuildStatus(StatusInput{Cluster: "c", Membership: "etcd", Members: members,
			Snapshot: &pgstore.Snapshot{Now: now,
				Nodes: []pgstore.NodeLease{{Node: "a#1", LeaseUntil: until, Live: true}, {Node: "a-rpc#1", LeaseUntil: until, Live: true},
					{Node: "old#0", LeaseUntil: now.Add(-time.Minute)}},
				Sessions: []pgstore.SessionState{{ID: "s1", Owner: "a#1", Held: true}, {ID: "s2", Owner: "old#0", Held: true},
					{ID: "s3", Owner: "a#1"}, {ID: "s4", Owner: "gone#9", Held: true}, {ID: "s5", Owner: "a#1", Held: true}}}})
		var got []string
		for _, l := range s.Leases {
			got = append(got, l.Node+" "+strings.Join(l.Sessions, ",")+" "+l.Member)
		}
		want := []string{"a#1 s1,s5 " + a, "a-rpc#1  " + rpc, "gone#9 s4 ", "old#0 s2 "}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("leases %q, want %q", got, want)
		}
	})
}

func TestStatusText(t *testing.T) {
	a, b, rpc := "10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.1:41234"
	in := StatusInput{Cluster: "prod", Membership: "etcd",
		Members: []cluster.EtcdMember{member(a, "a#1f2e", "http://10.0.0.1:9100/cluster/members", false),
			member(b, "b#3d4c", "", false), member(rpc, "a-rpc#5b6a", "", true)},
		Views: map[string]ViewRead{a: view(a, a, rpc)},
		Snapshot: &pgstore.Snapshot{Now: now,
			Nodes: []pgstore.NodeLease{{Node: "a#1f2e", LeaseUntil: now.Add(1400 * time.Millisecond), Live: true},
				{Node: "a-rpc#5b6a", LeaseUntil: now.Add(1200 * time.Millisecond), Live: true},
				{Node: "b#3d4c", LeaseUntil: now.Add(900 * time.Millisecond), Live: true},
				{Node: "c#7980", LeaseUntil: now.Add(-40 * time.Second)}},
			Sessions: []pgstore.SessionState{{ID: "s1", Owner: "a#1f2e", Held: true}, {ID: "s2", Owner: "c#7980", Held: true}}}}
	for _, tc := range []struct {
		name string
		in   func(StatusInput) StatusInput
		want string
	}{
		{"everything read", func(in StatusInput) StatusInput { return in }, `
Cluster "prod", etcd membership

Members (3 in etcd):
ADDRESS         ROLE    STORE NODE  SESSIONS  VIEW
10.0.0.1:7001   node    a#1f2e      1         DISAGREES: does not see 10.0.0.2:7001
10.0.0.2:7001   node    b#3d4c      0         not read: serves no view (started without --metrics-addr)
10.0.0.1:41234  client  a-rpc#5b6a  0         not read: a client serves no view
DISAGREEMENT: a view read differs from etcd (1 of 2 nodes' views read)

Leases (database clock 2025-03-04T10:00:00.000Z):
NODE        LEASE                                           SESSIONS  MEMBER
a#1f2e      live until 2025-03-04T10:00:01.400Z (in 1.4s)   1         10.0.0.1:7001
a-rpc#5b6a  live until 2025-03-04T10:00:01.200Z (in 1.2s)   0         10.0.0.1:41234
b#3d4c      live until 2025-03-04T10:00:00.900Z (in 900ms)  0         10.0.0.2:7001
c#7980      expired 2025-03-04T09:59:20.000Z (40s ago)      1         -
`},
		{"neither etcd nor the database read", func(in StatusInput) StatusInput {
			return StatusInput{Cluster: in.Cluster, Membership: "etcd", MembersErr: errors.New("etcd: context deadline exceeded"),
				DatabaseErr: errors.New("database: connection refused")}
		}, `
Cluster "prod", etcd membership

Members: not read: etcd: context deadline exceeded

Leases: not read: database: connection refused
`},
		{"automanaged", func(in StatusInput) StatusInput {
			return StatusInput{Cluster: in.Cluster, Membership: "automanaged", Snapshot: &pgstore.Snapshot{Now: now}}
		}, `
Cluster "prod", automanaged membership

Members: not read (only the etcd membership can be listed)

Leases (database clock 2025-03-04T10:00:00.000Z):
NODE  LEASE  SESSIONS  MEMBER
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := BuildStatus(tc.in(in)).WriteText(&buf); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != strings.TrimPrefix(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}
