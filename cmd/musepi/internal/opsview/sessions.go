package opsview

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/session"
)

// How a session is held (Session.Hold).
const (
	Held    = "held"    // an open Log of a live node holds it
	Expired = "expired" // held by a node whose lease ran out: the next open takes it over
	// OwnerLeft: held by a node whose lease has not run out but which is
	// no longer a member (etcd dropped it: killed, paused or cut off). The
	// next open takes the session over once that lease runs out
	// (Session.ClaimableAt).
	OwnerLeft = "owner left"
	Released  = "released" // no Log holds it
)

// Session is one session as `musepi sessions` shows it.
type Session struct {
	ID string `json:"id"`
	// Owner is the node incarnation that took Epoch (name#incarnation).
	Owner   string    `json:"owner"`
	Epoch   int64     `json:"epoch"`
	TakenAt time.Time `json:"taken_at"`
	Hold    string    `json:"hold"`
	// ClaimableAt is when the lease of an owner that left runs out, by
	// the database's clock (Hold OwnerLeft only).
	ClaimableAt *time.Time `json:"claimable_at,omitempty"`
	// Phase is where the session's record says it stands: "no record" (it
	// never waited out a backoff), "idle" (its last prompt settled),
	// "backoff: sleeping" (its retry chain waits out a backoff), or
	// "unreadable record: ..." (written by a newer musepi).
	Phase string `json:"phase"`
	// Attempt is the attempt of the retry chain the record holds (0: none).
	Attempt int `json:"attempt,omitempty"`
	// Due is when the record's wait ends, when it waits.
	Due *time.Time `json:"due,omitempty"`
	// ClaimedBy and ClaimUntil are a durable timer's claim on waking the
	// session, while it lasts.
	ClaimedBy  string     `json:"claimed_by,omitempty"`
	ClaimUntil *time.Time `json:"claim_until,omitempty"`
	// Entries is the seq of the history's last entry.
	Entries int64 `json:"entries"`
}

// Sessions are the snapshot's sessions, by id. members are the database
// node ids of the members etcd lists (cluster.MemberInfo.StoreNode); nil
// when they were not read (the automanaged membership, or etcd out of
// reach), and then no session is marked OwnerLeft.
func Sessions(snap *pgstore.Snapshot, members []string) []Session {
	leases := map[string]time.Time{}
	for _, n := range snap.Nodes {
		leases[n.Node] = n.LeaseUntil
	}
	out := make([]Session, 0, len(snap.Sessions))
	for _, s := range snap.Sessions {
		row := Session{ID: s.ID, Owner: s.Owner, Epoch: s.Epoch, TakenAt: s.TakenAt, Hold: hold(s, members), Entries: s.Entries}
		if until, ok := leases[s.Owner]; ok && row.Hold == OwnerLeft {
			row.ClaimableAt = &until
		}
		row.Phase, row.Attempt = phase(s.Record)
		if s.Record != nil && !s.Record.Due.IsZero() {
			row.Due = &s.Record.Due
		}
		if s.ClaimedBy != "" && s.ClaimUntil.After(snap.Now) {
			row.ClaimedBy, row.ClaimUntil = s.ClaimedBy, &s.ClaimUntil
		}
		out = append(out, row)
	}
	return out
}

// hold is how s is held, members (nil: not known) the database node ids
// of the cluster's members.
func hold(s pgstore.SessionState, members []string) string {
	switch {
	case !s.Held:
		return Released
	case !s.OwnerLive:
		return Expired
	case members != nil && !slices.Contains(members, s.Owner):
		return OwnerLeft
	}
	return Held
}

// phase is where rec (nil: none) says its session stands, and the attempt
// of its retry chain.
func phase(rec *pgstore.Record) (string, int) {
	if rec == nil {
		return "no record", 0
	}
	r, found, err := actors.DecodeRecord(*rec)
	switch {
	case err != nil:
		return "unreadable record: " + err.Error(), 0
	case !found:
		return "idle", 0 // cleared when its prompt settled
	}
	state := r.State.String() // idle or backoff: a record is taken at rest
	if r.State == session.Backoff {
		state += ": sleeping" // what its retry chain does, as the table has always said
	}
	return state, r.Chain.Attempt
}

// WriteSessions writes sessions as a table; now (the database's clock)
// puts the due times in relation, and when a session whose owner left
// becomes claimable ("owner left, claimable in 11.2s").
func WriteSessions(w io.Writer, sessions []Session, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tOWNER\tEPOCH\tHOLD\tPHASE\tATTEMPT\tDUE\tENTRIES")
	for _, s := range sessions {
		attempt, due, hold := "-", "-", s.Hold
		if s.Attempt > 0 {
			attempt = strconv.Itoa(s.Attempt)
		}
		if s.Due != nil {
			due = stamp(*s.Due) + " (" + relative(*s.Due, now) + ")"
		}
		if s.ClaimableAt != nil {
			hold += ", claimable " + relative(*s.ClaimableAt, now)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\n", s.ID, orDash(s.Owner), s.Epoch, hold, s.Phase, attempt, due, s.Entries)
	}
	return tw.Flush()
}

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
