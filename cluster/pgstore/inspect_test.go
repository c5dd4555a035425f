package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/history"
)

// An Inspector reads the nodes' leases, the sessions (epoch, owner, held,
// the owner's liveness, the last seq, the record and its due time) and the
// histories, and changes nothing: no node row, no epoch, no claim; its
// connections refuse writes.
func TestInspect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, url := newStore(t)
	held, _, err := s.OpenContext(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	due := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	if err := held.Commit(ctx, &pgstore.Record{Data: []byte("rec"), Due: due}, user(1, "a"), user(2, "b")); err != nil {
		t.Fatal(err)
	}
	released, _, err := s.OpenContext(ctx, "released")
	if err != nil {
		t.Fatal(err)
	}
	if err := released.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sql(t, url, `INSERT INTO musepi_nodes VALUES ('dead#1', now() - interval '5 seconds');
		INSERT INTO musepi_sessions (session_id, epoch, owner, held) VALUES ('orphan', 3, 'dead#1', true)`); err != nil {
		t.Fatal(err)
	}
	before := dump(t, url)

	in, err := pgstore.Inspect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	snap, err := in.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(snap.Now); d < -time.Minute || d > time.Minute {
		t.Errorf("the database's now %v is %v away from this process's", snap.Now, d)
	}
	var nodes []string
	for _, n := range snap.Nodes {
		nodes = append(nodes, n.Node+map[bool]string{true: " live", false: " expired"}[n.Live])
	}
	if want := []string{"dead#1 expired", s.Node() + " live"}; strings.Join(nodes, ", ") != strings.Join(want, ", ") {
		t.Errorf("nodes %v, want %v", nodes, want)
	}
	if len(snap.Sessions) != 3 {
		t.Fatalf("sessions %+v, want held, orphan, released", snap.Sessions)
	}
	for _, tc := range []struct {
		got  pgstore.SessionState
		want pgstore.SessionState
	}{
		{snap.Sessions[0], pgstore.SessionState{ID: "held", Epoch: 1, Owner: s.Node(), Held: true, OwnerLive: true, Entries: 2,
			Record: &pgstore.Record{Data: []byte("rec"), Due: due}, RecordEpoch: 1}},
		{snap.Sessions[1], pgstore.SessionState{ID: "orphan", Epoch: 3, Owner: "dead#1", Held: true}},
		{snap.Sessions[2], pgstore.SessionState{ID: "released", Epoch: 1, Owner: s.Node(), OwnerLive: true}},
	} {
		got := tc.got
		if got.TakenAt.IsZero() {
			t.Errorf("%s: no taken_at", got.ID)
		}
		got.TakenAt = time.Time{}
		if got.Record != nil && tc.want.Record != nil && got.Record.Due.Equal(tc.want.Record.Due) {
			got.Record.Due = tc.want.Record.Due // the same instant, maybe in another location
		}
		if !equalState(got, tc.want) {
			t.Errorf("session %+v (record %+v), want %+v (record %+v)", got, got.Record, tc.want, tc.want.Record)
		}
	}

	entries, err := in.History(ctx, "held")
	if err != nil || len(entries) != 2 || !proto.Equal(entries[1], user(2, "b")) {
		t.Errorf("History(held) = %v, %v; want its two entries", entries, err)
	}
	if _, err := in.History(ctx, "nope"); !errors.Is(err, pgstore.ErrNoSession) {
		t.Errorf("History(nope) = %v, want ErrNoSession", err)
	}
	var pe *pgconn.PgError
	if err := in.Exec(ctx, "UPDATE musepi_sessions SET epoch = epoch + 1"); !errors.As(err, &pe) || pe.Code != "25006" {
		t.Errorf("a write through the Inspector = %v, want SQLSTATE 25006 (read-only transaction)", err)
	}
	if after := dump(t, url); after != before {
		t.Errorf("the tables changed while inspected:\nbefore %s\nafter  %s", before, after)
	}
}

// equalState compares SessionStates, their records by value.
func equalState(a, b pgstore.SessionState) bool {
	ra, rb := a.Record, b.Record
	a.Record, b.Record = nil, nil
	if a != b || (ra == nil) != (rb == nil) {
		return false
	}
	return ra == nil || (string(ra.Data) == string(rb.Data) && ra.Due.Equal(rb.Due))
}

// dump is the nodes (their names: the Store's heartbeat moves its lease),
// and the rows of the sessions and records, as text.
func dump(t *testing.T, url string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var out string
	if err := conn.QueryRow(ctx, `SELECT
		(SELECT coalesce(string_agg(node, ';' ORDER BY node), '') FROM musepi_nodes) || ' | ' ||
		(SELECT coalesce(string_agg(s::text, ';' ORDER BY session_id), '') FROM musepi_sessions s) || ' | ' ||
		(SELECT coalesce(string_agg(r::text, ';' ORDER BY session_id), '') FROM musepi_records r)`).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Inspect reads only a database at this program's schema version, and
// creates nothing in one without the schema.
func TestInspectChecksTheSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("no schema", func(t *testing.T) {
		url := server.NewDatabase(t)
		if in, err := pgstore.Inspect(ctx, url); err == nil || !strings.Contains(err.Error(), "no MusePi tables") {
			if in != nil {
				in.Close()
			}
			t.Fatalf("Inspect of an empty database = %v, want an error saying it has no MusePi tables", err)
		}
		if err := sql(t, url, "SELECT 'musepi_schema_version'::regclass"); err == nil {
			t.Error("Inspect created musepi_schema_version")
		}
	})
	t.Run("newer", func(t *testing.T) {
		_, url := newStore(t)
		if err := sql(t, url, "INSERT INTO musepi_schema_version (version, name) VALUES ($1, 'from the future')", pgstore.SchemaVersion()+1); err != nil {
			t.Fatal(err)
		}
		if in, err := pgstore.Inspect(ctx, url); !errors.Is(err, pgstore.ErrSchemaTooNew) {
			if in != nil {
				in.Close()
			}
			t.Fatalf("Inspect of a newer schema = %v, want ErrSchemaTooNew", err)
		}
	})
}

// History fails on an entry that does not decode, as opening the session
// would.
func TestInspectHistoryInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, url := newStore(t)
	good, err := proto.Marshal(user(1, "fine"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sql(t, url, "INSERT INTO musepi_sessions (session_id) VALUES ('bad')"); err != nil {
		t.Fatal(err)
	}
	if err := sql(t, url, `INSERT INTO musepi_entries (session_id, seq, entry) VALUES ('bad', 1, $1), ('bad', 2, '\xff'::bytea)`, good); err != nil {
		t.Fatal(err)
	}
	in, err := pgstore.Inspect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	_, err = in.History(ctx, "bad")
	var he *history.Error
	if !errors.Is(err, history.ErrInvalid) || !errors.As(err, &he) || he.Line != 2 {
		t.Fatalf("History of a session with an undecodable seq 2 = %v, want ErrInvalid at line 2", err)
	}
}
