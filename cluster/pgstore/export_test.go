package pgstore

import (
	"context"
	"time"

	"github.com/musepi/musepi/retry"
)

// StopHeartbeat stops renewing the node's lease without closing the Store:
// the node looks dead to the others once the lease runs out.
func (s *Store) StopHeartbeat() {
	s.stop()
	s.beating.Wait()
}

// LoadMigrations exposes loadMigrations to the tests.
var LoadMigrations = loadMigrations

// RetryDelay is the delay before attempt+1 of a write of a Store drawing
// its jitter from src.
func RetryDelay(src retry.Source, attempt int) time.Duration {
	return (&Store{jitter: src}).retryDelay(attempt)
}

// Exec runs a statement on the Inspector's connections, to show they
// refuse writes.
func (i *Inspector) Exec(ctx context.Context, sql string) error {
	_, err := i.pool.Exec(ctx, sql)
	return err
}
