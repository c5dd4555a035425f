package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
)

// schemaVersions lists the versions recorded in url's schema_version table.
func schemaVersions(t *testing.T, url string) []int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT version FROM musepi_schema_version ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestEmbeddedMigrationsAreNumbered(t *testing.T) {
	t.Parallel()
	if pgstore.SchemaVersion() < 1 {
		t.Fatalf("SchemaVersion = %d", pgstore.SchemaVersion())
	}
	tests := []struct {
		name  string
		files []string
		ok    bool
	}{
		{"1 and 2", []string{"0001_a.sql", "0002_b.sql"}, true},
		{"gap", []string{"0001_a.sql", "0003_c.sql"}, false},
		{"not from 1", []string{"0002_b.sql"}, false},
		{"no number", []string{"init.sql"}, false},
	}
	for _, tt := range tests {
		fsys := fstest.MapFS{}
		for _, f := range tt.files {
			fsys["migrations/"+f] = &fstest.MapFile{Data: []byte("SELECT 1")}
		}
		if _, err := pgstore.LoadMigrations(fsys); (err == nil) != tt.ok {
			t.Errorf("%s: loadMigrations = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// Starting twice, and three nodes starting at once on an empty database,
// apply each migration exactly once.
func TestMigrationsIdempotent(t *testing.T) {
	t.Parallel()
	url := server.NewDatabase(t)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			s, err := pgstore.Connect(context.Background(), url)
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	connect(t, url, "again")
	vs := schemaVersions(t, url)
	if len(vs) != pgstore.SchemaVersion() || vs[len(vs)-1] != pgstore.SchemaVersion() {
		t.Errorf("schema versions recorded = %v, want 1..%d once each", vs, pgstore.SchemaVersion())
	}
}

// A database migrated by a newer program is refused with a clear error,
// and left as it is.
func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	url := server.NewDatabase(t)
	connect(t, url, "old")
	newer := pgstore.SchemaVersion() + 1
	if err := sql(t, url, "INSERT INTO musepi_schema_version (version, name) VALUES ($1, 'from the future')", newer); err != nil {
		t.Fatal(err)
	}
	_, err := pgstore.Connect(context.Background(), url)
	if !errors.Is(err, pgstore.ErrSchemaTooNew) {
		t.Fatalf("Connect to a newer schema = %v, want ErrSchemaTooNew", err)
	}
	t.Log(err)
	if vs := schemaVersions(t, url); len(vs) != newer {
		t.Errorf("versions after the refusal = %v", vs)
	}
}

// The rows of node incarnations whose lease ran out more than PruneGrace
// ago go, at Connect and then every ten leases from the heartbeat; a row
// within the grace period, a live node's and the Store's own stay. A
// session whose owner's row went is as free as it was before.
func TestPruneDeadNodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		lease time.Duration
		// rowsFirst inserts the rows before the Store connects: its Connect
		// prunes them; otherwise its heartbeat does.
		rowsFirst bool
	}{
		{"at Connect", pgstore.DefaultLease, true},
		{"by the heartbeat", pgstore.MinLease, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := server.NewDatabase(t)
			grace := pgstore.PruneGrace(tc.lease)
			insert := func() {
				t.Helper()
				if err := sql(t, url, `INSERT INTO musepi_nodes (node, lease_until) VALUES
					('past-grace#1', now() - $1::interval - interval '1 second'),
					('within-grace#2', now() - $1::interval + interval '30 seconds'),
					('live#3', now() + interval '1 hour')`, grace); err != nil {
					t.Fatal(err)
				}
				if err := sql(t, url, `INSERT INTO musepi_sessions (session_id, epoch, owner, held)
					VALUES ('s1', 4, 'past-grace#1', true)`); err != nil {
					t.Fatal(err)
				}
			}
			if tc.rowsFirst {
				connect(t, url, "first").Close() // the schema
				insert()
			}
			s := connect(t, url, "pruner", pgstore.WithLease(tc.lease))
			if !tc.rowsFirst {
				insert()
			}
			start := time.Now()
			for nodeRows(t, url)["past-grace#1"] {
				if time.Since(start) > 10*time.Second {
					t.Fatalf("the row of a node dead for longer than %s is still there after 10 s", grace)
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("pruned %s after the rows were in (grace %s)", time.Since(start).Round(time.Millisecond), grace)
			rows := nodeRows(t, url)
			for _, n := range []string{"within-grace#2", "live#3", s.Node()} {
				if !rows[n] {
					t.Errorf("the row of %s was pruned; rows left: %v", n, rows)
				}
			}
			log, _, err := s.OpenContext(context.Background(), "s1")
			if err != nil {
				t.Fatalf("open a session whose owner's row was pruned: %v", err)
			}
			if log.Epoch() != 5 {
				t.Errorf("epoch %d after taking over the pruned owner's session at epoch 4, want 5", log.Epoch())
			}
			log.Close()
		})
	}
}

// nodeRows are the nodes of musepi_nodes.
func nodeRows(t *testing.T, url string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT node FROM musepi_nodes")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

func TestConnectRefusesBadOptions(t *testing.T) {
	t.Parallel()
	url := server.NewDatabase(t)
	for name, opt := range map[string]pgstore.Option{
		"empty node name":  pgstore.WithNode(""),
		"lease of 0":       pgstore.WithLease(0),
		"lease of 1 ms":    pgstore.WithLease(time.Millisecond),
		"negative timeout": pgstore.WithTimeout(-time.Second),
		"negative retry":   pgstore.WithWriteRetry(-time.Second),
	} {
		if s, err := pgstore.Connect(context.Background(), url, opt); err == nil {
			s.Close()
			t.Errorf("%s: Connect succeeded", name)
		}
	}
	if _, err := pgstore.Connect(context.Background(), "postgres://nobody@127.0.0.1:1/x?connect_timeout=5"); err == nil {
		t.Error("Connect to a closed port succeeded")
	}
}

// TestConnectTimesOut: Connect to a database that accepts connections and
// never answers fails within its connect timeout: DefaultConnectTimeout
// when the URL sets none, the URL's connect_timeout otherwise.
func TestConnectTimesOut(t *testing.T) {
	t.Parallel()
	silent := pgtest.Silent(t)
	for _, tc := range []struct {
		name string
		url  string
		want time.Duration
	}{
		{"the default", silent, pgstore.DefaultConnectTimeout},
		{"the URL's connect_timeout", silent + "&connect_timeout=1", time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			s, err := pgstore.Connect(context.Background(), tc.url)
			took := time.Since(start)
			if err == nil {
				s.Close()
				t.Fatal("Connect succeeded")
			}
			if took < tc.want || took > tc.want+2*time.Second || !strings.Contains(err.Error(), "timeout") {
				t.Errorf("Connect = %v after %s; want a timeout after %s", err, took.Round(time.Millisecond), tc.want)
			}
			t.Logf("%s: %v", took.Round(time.Millisecond), err)
		})
	}
}
