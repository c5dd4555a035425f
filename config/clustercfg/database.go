package clustercfg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/cluster/pgstore"
)

// DefaultHistoryLease is history_lease_ms when the key is left out
// (pgstore's default lease).
const DefaultHistoryLease = pgstore.DefaultLease

// connectTimeout bounds connecting to history_database and migrating it.
const connectTimeout = 30 * time.Second

// RuntimeOptions is the embedded config.Config's, which cannot keep
// histories in history_database: with it set, RuntimeOptions fails (use
// NewRuntime, which connects).
func (c *Config) RuntimeOptions(extra ...musepi.Option) ([]musepi.Option, error) {
	opts, err := c.Config.RuntimeOptions(extra...)
	if err != nil {
		return nil, err
	}
	if c.HistoryDatabase != "" {
		return nil, errors.New("config: history_database is set: Config.NewRuntime connects to it (RuntimeOptions opens no connection)")
	}
	return opts, nil
}

// NewRuntime starts a runtime from the configuration and extra (see
// config.Config.RuntimeOptions). With history_database it first connects
// to the database (migrating its schema; at most 30 s) and keeps the
// histories there; the runtime closes the connection on Shutdown.
// Sessions still name their model:
// rt.NewSession(ctx, musepi.WithModel(cfg.DefaultModel)).
func (c *Config) NewRuntime(extra ...musepi.Option) (*musepi.Runtime, error) {
	if c.HistoryDatabase == "" {
		return c.Config.NewRuntime(extra...)
	}
	opts, err := c.Config.RuntimeOptions()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	lease := c.HistoryLease
	if lease == 0 {
		lease = DefaultHistoryLease
	}
	store, err := pgstore.Connect(ctx, c.HistoryDatabase, pgstore.WithLease(lease))
	if err != nil {
		return nil, fmt.Errorf("config: history_database: %w", err)
	}
	rt, err := musepi.NewRuntime(append(append(opts, musepi.WithHistoryStore(store)), extra...)...)
	if err != nil {
		store.Close()
		return nil, err
	}
	return rt, nil
}

// database checks history_database and history_lease_ms.
func (v *validator) database() {
	c, base := v.c, v.base
	if c.HistoryDatabase == "" {
		if c.HistoryLease != 0 {
			v.add("history_lease_ms", "applies only with history_database")
		}
		return
	}
	if base.HistoryDir != "" {
		v.add("history_database", "history_dir is set too: keep histories in files or in the database, not both")
	}
	if base.HistorySync != "" {
		v.add("history_sync", "applies to history files; with history_database every write is committed before it returns")
	}
	v.check("history_database", checkPostgresURL(c.HistoryDatabase))
	if c.HistoryLease != 0 && c.HistoryLease < pgstore.MinLease {
		v.add("history_lease_ms", "must be at least %d, got %d", pgstore.MinLease.Milliseconds(), c.HistoryLease.Milliseconds())
	}
}

// checkPostgresURL accepts a postgres:// or postgresql:// URL with a host
// that pgx can use; its errors never quote the URL's password (pgx masks
// it).
func checkPostgresURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL: %v", err)
	case u.Scheme != "postgres" && u.Scheme != "postgresql":
		return fmt.Errorf(`want a "postgres://" or "postgresql://" URL, got scheme %q`, u.Scheme)
	case u.Host == "":
		return errors.New("the URL names no host")
	}
	if _, err := pgxpool.ParseConfig(s); err != nil {
		return err
	}
	return nil
}
