package opsview

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cluster/pgstore"
)

// ViewPath is where `musepi node --metrics-addr` serves its NodeView.
const ViewPath = "/cluster/members"

// NodeView is what a node serves on ViewPath: the members it sees
// (Runtime.ClusterMembers).
type NodeView struct {
	// Address is the node's own cluster address.
	Address string `json:"address"`
	// Members are the addresses of the members it sees, itself included,
	// sorted.
	Members []string `json:"members"`
}

// ViewRead is what reading a member's view found: the view, or why it
// could not be read.
type ViewRead struct {
	View *NodeView
	Err  error
}

// StatusInput is what the status command read.
type StatusInput struct {
	Cluster    string // the cluster's name
	Membership string // "etcd" or "automanaged"
	// Members are the member keys in etcd, or why etcd could not be read
	// (both nil for the automanaged membership, which is not read).
	Members    []cluster.EtcdMember
	MembersErr error
	// Views are the members' views, by address; none for a member that
	// serves no view.
	Views map[string]ViewRead
	// Snapshot is the database's state, or why it could not be read.
	Snapshot    *pgstore.Snapshot
	DatabaseErr error
}

// Status is what `musepi cluster status` shows.
type Status struct {
	Cluster    string `json:"cluster"`
	Membership string `json:"membership"`
	// Members are the members as etcd has them, each with the members it
	// sees; nil when they were not read (MembersError says why).
	Members      []Member `json:"members"`
	MembersError string   `json:"members_error,omitempty"`
	// Agree is true when etcd was read and no view that was read differs
	// from it; Unread counts the nodes (not clients) whose view was not.
	Agree  bool `json:"agree"`
	Unread int  `json:"unread"`
	// DatabaseNow is the database's clock, which leases run on; Leases are
	// its node incarnations, with the sessions each holds; nil when the
	// database was not read (DatabaseError says why).
	DatabaseNow   *time.Time `json:"database_now,omitempty"`
	Leases        []Lease    `json:"leases"`
	DatabaseError string     `json:"database_error,omitempty"`
}

// Member is one member as etcd has it, and as it sees the others.
type Member struct {
	Address string `json:"address"`
	ID      string `json:"id"`
	// Client is true for a member that hosts nothing (musepi rpc
	// --cluster).
	Client    bool   `json:"client,omitempty"`
	StoreNode string `json:"store_node,omitempty"`
	ViewURL   string `json:"view_url,omitempty"`
	// Sees are the members it sees; nil when its view was not read
	// (ViewError says why). Missing are the members etcd has that it does
	// not see, Extra those it sees that etcd does not have.
	Sees      []string `json:"sees,omitempty"`
	ViewError string   `json:"view_error,omitempty"`
	Missing   []string `json:"missing,omitempty"`
	Extra     []string `json:"extra,omitempty"`
}

// agrees reports whether m's view was read and matches etcd's members.
func (m Member) agrees() bool { return m.Sees != nil && len(m.Missing) == 0 && len(m.Extra) == 0 }

// Lease is a node incarnation in the database.
type Lease struct {
	Node string `json:"node"` // name#incarnation
	// LeaseUntil is when its lease runs out, Live whether it has not yet;
	// nil for an incarnation that holds sessions but has no row (its Store
	// closed, which frees them, or its row was pruned).
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	Live       bool       `json:"live"`
	// Member is the address of the etcd member this incarnation is ("":
	// none).
	Member string `json:"member,omitempty"`
	// Sessions are the sessions it holds, by id.
	Sessions []string `json:"sessions"`
}

// BuildStatus compares what the command read.
func BuildStatus(in StatusInput) *Status {
	s := &Status{Cluster: in.Cluster, Membership: in.Membership}
	if in.MembersErr != nil {
		s.MembersError = in.MembersErr.Error()
	}
	var inEtcd []string
	for _, m := range in.Members {
		inEtcd = append(inEtcd, m.Address)
	}
	slices.Sort(inEtcd)
	if in.Membership == "etcd" && in.MembersErr == nil {
		s.Members = []Member{} // read, if empty
		s.Agree = true
	}
	for _, em := range in.Members {
		m := Member{Address: em.Address, ID: em.ID, Client: em.Info.Client, StoreNode: em.Info.StoreNode, ViewURL: em.Info.ViewURL}
		m.compare(inEtcd, in.Views)
		if m.Sees != nil && !m.agrees() {
			s.Agree = false
		}
		if m.Sees == nil && !m.Client {
			s.Unread++
		}
		s.Members = append(s.Members, m)
	}
	if in.DatabaseErr != nil {
		s.DatabaseError = in.DatabaseErr.Error()
	}
	if in.Snapshot != nil {
		s.DatabaseNow = &in.Snapshot.Now
		s.Leases = leases(in.Snapshot, s.Members)
	}
	return s
}

// compare sets m's view from views, and how it differs from inEtcd.
func (m *Member) compare(inEtcd []string, views map[string]ViewRead) {
	read, ok := views[m.Address]
	switch {
	case m.Client:
		m.ViewError = "a client serves no view"
		return
	case m.ViewURL == "":
		m.ViewError = "serves no view (started without --metrics-addr)"
		return
	case !ok:
		m.ViewError = "not asked"
		return
	case read.Err != nil:
		m.ViewError = read.Err.Error()
		return
	case read.View.Address != m.Address:
		m.ViewError = fmt.Sprintf("%s serves the view of %s", m.ViewURL, read.View.Address)
		return
	}
	m.Sees = slices.Sorted(slices.Values(read.View.Members))
	if m.Sees == nil {
		m.Sees = []string{}
	}
	for _, a := range inEtcd {
		if !slices.Contains(m.Sees, a) {
			m.Missing = append(m.Missing, a)
		}
	}
	for _, a := range m.Sees {
		if !slices.Contains(inEtcd, a) {
			m.Extra = append(m.Extra, a)
		}
	}
}

// leases are the snapshot's node incarnations, and those that hold
// sessions without a row, each with its member and its sessions.
func leases(snap *pgstore.Snapshot, members []Member) []Lease {
	byNode := map[string]*Lease{}
	var out []*Lease
	add := func(l *Lease) {
		byNode[l.Node] = l
		out = append(out, l)
	}
	for _, n := range snap.Nodes {
		add(&Lease{Node: n.Node, LeaseUntil: &n.LeaseUntil, Live: n.Live, Sessions: []string{}})
	}
	for _, s := range snap.Sessions {
		if !s.Held {
			continue
		}
		l := byNode[s.Owner]
		if l == nil {
			l = &Lease{Node: s.Owner, Sessions: []string{}}
			add(l)
		}
		l.Sessions = append(l.Sessions, s.ID)
	}
	for _, m := range members {
		if l := byNode[m.StoreNode]; l != nil && m.StoreNode != "" {
			l.Member = m.Address
		}
	}
	slices.SortFunc(out, func(a, b *Lease) int { return strings.Compare(a.Node, b.Node) })
	leases := make([]Lease, len(out))
	for i, l := range out {
		leases[i] = *l
	}
	return leases
}

// WriteText writes the status as tables: the members, then the leases.
func (s *Status) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "Cluster %q, %s membership\n\n", s.Cluster, s.Membership)
	switch {
	case s.MembersError != "":
		fmt.Fprintf(w, "Members: not read: %s\n", s.MembersError)
	case s.Members == nil && s.Membership != "etcd":
		fmt.Fprintf(w, "Members: not read (only the etcd membership can be listed)\n")
	default:
		if err := s.writeMembers(w); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	if s.DatabaseNow == nil {
		_, err := fmt.Fprintf(w, "Leases: not read: %s\n", s.DatabaseError)
		return err
	}
	return s.writeLeases(w)
}

// writeMembers writes the members' table and whether their views agree.
func (s *Status) writeMembers(w io.Writer) error {
	held := map[string]int{}
	for _, l := range s.Leases {
		held[l.Node] = len(l.Sessions)
	}
	fmt.Fprintf(w, "Members (%d in etcd):\n", len(s.Members))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tROLE\tSTORE NODE\tSESSIONS\tVIEW")
	nodes, read := 0, 0
	for _, m := range s.Members {
		role := "node"
		if m.Client {
			role = "client"
		} else {
			nodes++
		}
		sessions := "-"
		if s.DatabaseNow != nil {
			sessions = strconv.Itoa(held[m.StoreNode])
		}
		if m.Sees != nil {
			read++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Address, role, orDash(m.StoreNode), sessions, m.view())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "the views read agree with etcd"
	if !s.Agree {
		verdict = "DISAGREEMENT: a view read differs from etcd"
	}
	_, err := fmt.Fprintf(w, "%s (%d of %d nodes' views read)\n", verdict, read, nodes)
	return err
}

// view says how m sees the members.
func (m Member) view() string {
	switch {
	case m.Sees == nil:
		return "not read: " + m.ViewError
	case m.agrees():
		return "agrees"
	}
	var diffs []string
	if len(m.Missing) > 0 {
		diffs = append(diffs, "does not see "+strings.Join(m.Missing, ", "))
	}
	if len(m.Extra) > 0 {
		diffs = append(diffs, "sees "+strings.Join(m.Extra, ", ")+" (not in etcd)")
	}
	return "DISAGREES: " + strings.Join(diffs, "; ")
}

// writeLeases writes the leases' table.
func (s *Status) writeLeases(w io.Writer) error {
	now := *s.DatabaseNow
	fmt.Fprintf(w, "Leases (database clock %s):\n", stamp(now))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tLEASE\tSESSIONS\tMEMBER")
	for _, l := range s.Leases {
		lease := "no row (closed, or pruned)"
		switch {
		case l.LeaseUntil != nil && l.Live:
			lease = "live until " + stamp(*l.LeaseUntil) + " (" + relative(*l.LeaseUntil, now) + ")"
		case l.LeaseUntil != nil:
			lease = "expired " + stamp(*l.LeaseUntil) + " (" + relative(*l.LeaseUntil, now) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", l.Node, lease, len(l.Sessions), orDash(l.Member))
	}
	return tw.Flush()
}
