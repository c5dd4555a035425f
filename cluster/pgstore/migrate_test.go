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

// Connect removes the rows of nodes whose lease ran out a day ago, and
// keeps the others.
func TestConnectPrunesLongDeadNodes(t *testing.T) {
	url := server.NewDatabase(t)
	connect(t, url, "first")
	if err := sql(t, url, `INSERT INTO musepi_nodes (node, lease_until) VALUES
		('long-dead#1', now() - interval '25 hours'), ('just-dead#2', now() - interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	connect(t, url, "second")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var long, recent int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE node = 'long-dead#1'), count(*) FILTER (WHERE node = 'just-dead#2')
		FROM musepi_nodes`).Scan(&long, &recent); err != nil {
		t.Fatal(err)
	}
	if long != 0 || recent != 1 {
		t.Errorf("after Connect: %d rows of the node dead 25 h (want 0), %d of the one dead 1 min (want 1)", long, recent)
	}
}

func TestConnectRefusesBadOptions(t *testing.T) {
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
