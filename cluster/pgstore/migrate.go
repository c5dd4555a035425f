package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrSchemaTooNew is returned by Connect for a database whose schema
// version is newer than this program knows: a newer musepi migrated it.
var ErrSchemaTooNew = errors.New("database schema is newer than this program")

// The numbered migrations, NNNN_name.sql, applied in order.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one numbered schema change.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations are the embedded migrations, versions 1..n.
var migrations = mustLoadMigrations(migrationFiles)

// SchemaVersion is the schema version this program migrates databases to.
func SchemaVersion() int { return len(migrations) }

// migrateLock is the advisory lock key that serialises nodes migrating
// the same database at once ("musepi" in ASCII, then 1).
const migrateLock int64 = 0x6d7573657069_01

func mustLoadMigrations(fsys fs.FS) []migration {
	ms, err := loadMigrations(fsys)
	if err != nil {
		panic(err) // the embedded files are part of the program: a test checks them
	}
	return ms
}

// loadMigrations reads migrations/NNNN_name.sql, which must be numbered
// 1, 2, 3, ... without gaps.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for i, name := range names { // Glob sorts
		base := path.Base(name)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != i+1 {
			return nil, fmt.Errorf("pgstore: migration %s: want the number %04d_ (numbered from 1 without gaps)", name, i+1)
		}
		sql, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: string(sql)})
	}
	return ms, nil
}

// migrate brings the database to the latest schema version, one migration
// per transaction, under an advisory lock so that nodes starting together
// apply each migration once. It fails with ErrSchemaTooNew for a database
// at a version newer than it knows.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	for {
		done := false
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			done, err = migrateStep(ctx, tx)
			return err
		})
		if err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		if done {
			return nil
		}
	}
}

// migrateStep applies the next migration, or reports that none is left.
func migrateStep(ctx context.Context, tx pgx.Tx) (done bool, err error) {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS musepi_schema_version (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return false, err
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM musepi_schema_version").Scan(&current); err != nil {
		return false, err
	}
	switch {
	case current > len(migrations):
		return false, fmt.Errorf("%w: the database is at version %d, this program knows up to %d: run a newer musepi",
			ErrSchemaTooNew, current, len(migrations))
	case current == len(migrations):
		return true, nil
	}
	m := migrations[current]
	if _, err := tx.Exec(ctx, m.sql); err != nil {
		return false, fmt.Errorf("apply %s: %w", m.name, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO musepi_schema_version (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
		return false, fmt.Errorf("record %s: %w", m.name, err)
	}
	return false, nil
}
