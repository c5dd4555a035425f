package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/retry"
)

// Store is the cluster's durable state on PostgreSQL: session histories
// (a history.Store), each session's activation epoch, its compact record,
// the durable timers over those records, and the credential blocks and
// model cooldowns nodes share. One Store is one node's view; it keeps the
// node's lease alive while it is open. It is safe for concurrent use.
type Store struct {
	pool       *pgxpool.Pool
	node       string // name#incarnation: this Store's owner id in the tables
	lease      time.Duration
	timeout    time.Duration
	writeRetry time.Duration
	log        *slog.Logger

	jitterMu sync.Mutex
	jitter   retry.Source
	outage   outage

	// born is when the Store was made; renewed is when the last renewal
	// of the node's lease that succeeded began, in nanoseconds since born
	// (monotonic: a pause of the process counts).
	born    time.Time
	renewed atomic.Int64
	// renewMu serialises renewals; leaseGen counts the times a renewal
	// found the lease lapsed and began a new one (see Log.Hold).
	renewMu  sync.Mutex
	leaseGen atomic.Uint64
	// abandoned is set once the node gave its lease up (Abandon): no
	// renewal goes through after it.
	abandoned atomic.Bool

	closed    atomic.Bool
	closing   chan struct{} // closed when Close begins
	closeOnce sync.Once
	stop      context.CancelFunc
	beating   sync.WaitGroup
}

var (
	_ history.Store = (*Store)(nil)
	_ Timers        = (*Store)(nil)
	_ Blocks        = (*Store)(nil)
)

// MinLease is the shortest lease (WithLease): renewing it every third must
// stay possible.
const MinLease = 100 * time.Millisecond

// DefaultLease is the lease of a Store without WithLease.
const DefaultLease = 15 * time.Second

// Option configures a Store.
type Option func(*Store)

// WithNode names this node (default: the host name). The Store's owner id
// is the name plus a random incarnation suffix, so a node that restarts
// under the same name does not mistake its dead predecessor's sessions for
// its own.
func WithNode(name string) Option { return func(s *Store) { s.node = name } }

// WithLease sets how long the node's lease lasts without renewal (default
// 15 s, at least 100 ms; renewed every third of it). A session held by a node whose lease
// has run out may be opened by another node, which takes it over.
func WithLease(d time.Duration) Option { return func(s *Store) { s.lease = d } }

// WithTimeout bounds each database operation of the history.Store and
// history.Log methods, which take no context (default 30 s): each attempt
// of a write that is retried (WithWriteRetry).
func WithTimeout(d time.Duration) Option { return func(s *Store) { s.timeout = d } }

// WithLogger logs takeovers, lease renewal failures and the outages that
// writes retry through (default: none).
func WithLogger(log *slog.Logger) Option { return func(s *Store) { s.log = log } }

// DefaultWriteRetry is how long a write is retried without WithWriteRetry.
const DefaultWriteRetry = 30 * time.Second

// WithWriteRetry sets how long a Log's write that meets transient errors
// (Transient: the server restarting, a broken connection) is tried again,
// from its first failure (default DefaultWriteRetry; 0: never). The
// delays between attempts start at 100 ms and double up to 2 s, each
// jittered to 75-100 % (retry.JitterFactor).
func WithWriteRetry(d time.Duration) Option { return func(s *Store) { s.writeRetry = d } }

// WithJitter sets the source the write retries' jitter is drawn from
// (default: a PCG generator seeded at random), for tests that need exact
// delays. The Store draws from it under a lock.
func WithJitter(src retry.Source) Option { return func(s *Store) { s.jitter = src } }

// DefaultConnectTimeout bounds each new connection to the database (the
// TCP connect, TLS and the server's startup) when the URL sets no
// connect_timeout: a server that does not answer fails Connect, and the
// writes that need a new connection, within it rather than never.
const DefaultConnectTimeout = 5 * time.Second

// Connect opens a pool to the database at url (a PostgreSQL connection
// string or URL), migrates its schema to SchemaVersion (failing with
// ErrSchemaTooNew for a newer one), registers the node, prunes the rows of
// nodes dead for longer than PruneGrace and starts renewing the node's
// lease (and pruning again every ten leases). The pool's size and the like
// are set in url (pool_max_conns=N; see pgxpool); connect_timeout, if url
// sets none, is DefaultConnectTimeout.
func Connect(ctx context.Context, url string, opts ...Option) (*Store, error) {
	host, _ := os.Hostname()
	s := &Store{node: host, lease: DefaultLease, timeout: 30 * time.Second, writeRetry: DefaultWriteRetry,
		log: slog.New(slog.DiscardHandler), closing: make(chan struct{}), born: time.Now()}
	for _, o := range opts {
		o(s)
	}
	switch {
	case s.node == "":
		return nil, errors.New("pgstore: empty node name")
	case s.lease < MinLease || s.timeout <= 0:
		return nil, fmt.Errorf("pgstore: lease %v must be at least %v, timeout %v positive", s.lease, MinLease, s.timeout)
	case s.writeRetry < 0:
		return nil, fmt.Errorf("pgstore: negative write retry %v", s.writeRetry)
	}
	if s.jitter == nil {
		s.jitter = retry.NewPCGSource(mrand.Uint64(), mrand.Uint64())
	}
	s.node += "#" + incarnation()
	pcfg, err := poolConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	s.pool = pool
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	if err := s.renew(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: register node %s: %w", s.node, err)
	}
	if _, err := s.prune(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	beat, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.beating.Go(func() { s.heartbeat(beat) })
	return s, nil
}

// poolConfig is the pool configuration of url: its connect_timeout
// DefaultConnectTimeout if it sets none.
func poolConfig(url string) (*pgxpool.Config, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	return pcfg, nil
}

// Node is this Store's owner id: the node name and its incarnation.
func (s *Store) Node() string { return s.node }

// incarnation is a random suffix telling apart the runs of one node name.
func incarnation() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// renew extends the node's lease. A lease that had run out (the process
// was paused, or cut off from the database, past it) is not extended but
// begun anew, and leaseGen counts it: other nodes may have taken the
// sessions over meanwhile, so each Log re-claims its session before it
// acts again (Log.Hold). The count is made before renew returns.
func (s *Store) renew(ctx context.Context) error {
	s.renewMu.Lock()
	defer s.renewMu.Unlock()
	if s.abandoned.Load() {
		return ErrAbandoned
	}
	start := time.Since(s.born)
	var live *bool // nil: no row (the first renewal, or a pruned one)
	err := s.pool.QueryRow(ctx, `WITH old AS (SELECT lease_until > now() AS live FROM musepi_nodes WHERE node = $1)
		INSERT INTO musepi_nodes (node, lease_until) VALUES ($1, now() + $2)
		ON CONFLICT (node) DO UPDATE SET lease_until = EXCLUDED.lease_until
		RETURNING (SELECT live FROM old)`, s.node, s.lease).Scan(&live)
	if err != nil {
		return err
	}
	if first := s.renewed.Load() == 0 && s.leaseGen.Load() == 0; (live == nil || !*live) && !first {
		s.leaseGen.Add(1)
		s.log.Warn("the node's lease had run out (was the process paused?): each session re-claims its epoch before it acts again", slog.String("node", s.node))
	}
	s.renewed.Store(int64(start))
	return nil
}

// RenewLease renews the node's lease now (the heartbeat does it every
// third of the lease): a node that finds its lease not sure
// (LeaseSure) tells with it whether it can still hold its sessions.
func (s *Store) RenewLease(ctx context.Context) error {
	if err := s.renew(ctx); err != nil {
		return fmt.Errorf("pgstore: renew the node's lease: %w", err)
	}
	return nil
}

// Lease is how long the node's lease lasts without renewal (WithLease).
func (s *Store) Lease() time.Duration { return s.lease }

// LeaseSure reports whether the node's lease is certainly still running,
// by this process's monotonic clock: its last renewal began less than the
// lease minus a third of it ago (the third covers the database's delay in
// applying the renewal and the clocks' drift). A process paused past that
// cannot be sure: other nodes may have taken its sessions over.
func (s *Store) LeaseSure() bool {
	return !s.abandoned.Load() && time.Since(s.born) < time.Duration(s.renewed.Load())+s.lease*2/3
}

// PruneGrace is how long a node incarnation's row stays in musepi_nodes
// after its lease ran out: ten leases, at least a minute. Nothing needs the
// row by then: a session whose owner has no row is free, as one whose
// owner's lease ran out (Open and the timers read owner liveness through a
// LEFT JOIN, and no foreign key references the table); the row only shows
// operators that the incarnation was there (musepi cluster status).
func PruneGrace(lease time.Duration) time.Duration { return max(10*lease, time.Minute) }

// pruneBeats is how many lease renewals the heartbeat makes between two
// prunes: ten leases.
const pruneBeats = 30

// prune deletes the rows of node incarnations whose lease ran out more
// than PruneGrace ago: nodes that died without closing (and `musepi rpc
// --cluster` clients), which Close would have deleted.
func (s *Store) prune(ctx context.Context) (int64, error) {
	tag, err := s.pool.Exec(ctx, "DELETE FROM musepi_nodes WHERE lease_until < now() - $1::interval", PruneGrace(s.lease))
	if err != nil {
		return 0, fmt.Errorf("pgstore: prune dead nodes: %w", err)
	}
	return tag.RowsAffected(), nil
}

// heartbeat renews the lease every third of its length until ctx ends,
// and prunes dead nodes' rows every pruneBeats renewals.
func (s *Store) heartbeat(ctx context.Context) {
	t := time.NewTicker(s.lease / 3)
	defer t.Stop()
	for beat := 1; ; beat++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, s.lease/3)
		err := s.renew(rctx)
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, ErrAbandoned) {
			s.log.Warn("cannot renew the node's lease; once it runs out other nodes may take its sessions over", slog.Any("error", err), slog.String("node", s.node))
		}
		if beat%pruneBeats == 0 {
			s.pruneBeat(ctx)
		}
	}
}

// pruneBeat is the heartbeat's prune, bounded by a third of the lease.
func (s *Store) pruneBeat(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, s.lease/3)
	defer cancel()
	n, err := s.prune(pctx)
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("cannot prune the rows of dead nodes; the next prune tries again", slog.Any("error", err), slog.String("node", s.node))
	case n > 0:
		s.log.Debug("pruned the rows of dead node incarnations", slog.Int64("rows", n), slog.Duration("grace", PruneGrace(s.lease)))
	}
}

// ErrAbandoned is why a Store that gave its lease up (Abandon) renews it
// no more.
var ErrAbandoned = errors.New("pgstore: the node gave its lease up (the cluster dropped it)")

// Abandon gives the node's lease up at once, for a node the cluster
// dropped: it acts for its sessions no more, so they are free for the
// other nodes to take over now, not once a lease that its heartbeat would
// go on renewing through a long (with etcd away, endless) leave has run
// out. The heartbeat stops, every renewal fails with ErrAbandoned from now
// on (so Log.Hold does), and the node's row goes; when the database is out
// of reach the lease runs out unrenewed instead. Close still closes the
// pool. A second call does nothing.
func (s *Store) Abandon(ctx context.Context) error {
	s.renewMu.Lock()
	first := !s.abandoned.Swap(true)
	s.renewMu.Unlock()
	if !first || s.closed.Load() {
		return nil
	}
	s.stop()
	s.beating.Wait()
	if _, err := s.pool.Exec(ctx, "DELETE FROM musepi_nodes WHERE node = $1", s.node); err != nil {
		return fmt.Errorf("pgstore: give node %s's lease up: %w", s.node, err)
	}
	return nil
}

// Close stops renewing the lease and removes the node's row, so that the
// sessions it still holds may be taken over at once, and closes the pool.
// Logs opened from the Store fail with history.ErrClosed afterwards.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.closing)
		s.stop()
		s.beating.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		defer cancel()
		if _, derr := s.pool.Exec(ctx, "DELETE FROM musepi_nodes WHERE node = $1", s.node); derr != nil {
			err = &history.Error{Op: "close", Path: s.node, Err: derr}
		}
		s.pool.Close()
	})
	return err
}

// ctx is a context bounded by the Store's timeout, for the methods that
// take none.
func (s *Store) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}
