package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/musepi/musepi/history"
)

// Kind is what a block applies to.
type Kind string

// The kinds of block.
const (
	// CredentialKind blocks one credential of a provider after a usage
	// limit: Scope is the provider, Name the credential's name (never the
	// API key itself).
	CredentialKind Kind = "credential"
	// ModelKind cools a model selector down for a role: Scope is the
	// role, Name the selector ("provider/model").
	ModelKind Kind = "model"
)

// BlockKey names one credential or model selector.
type BlockKey struct {
	Kind  Kind
	Scope string // provider or role
	Name  string // credential name or model selector
}

// CredentialKey is the key of credential name of provider.
func CredentialKey(provider, name string) BlockKey {
	return BlockKey{Kind: CredentialKind, Scope: provider, Name: name}
}

// ModelKey is the key of a model selector's cooldown for role.
func ModelKey(role, selector string) BlockKey {
	return BlockKey{Kind: ModelKind, Scope: role, Name: selector}
}

func (k BlockKey) String() string { return fmt.Sprintf("%s %s/%s", k.Kind, k.Scope, k.Name) }

func (k BlockKey) valid() error {
	if (k.Kind != CredentialKind && k.Kind != ModelKind) || k.Scope == "" || k.Name == "" {
		return fmt.Errorf("pgstore: bad block key %q/%q/%q: want kind credential or model, a scope and a name", k.Kind, k.Scope, k.Name)
	}
	return nil
}

// Blocks are the credential blocks and model cooldowns the nodes share.
// Times are kept to the microsecond. Later wins: a block is only ever
// extended by Block, and ended early only by a deliberate Clear.
type Blocks interface {
	// Block blocks key until until, unless it is already blocked later,
	// and returns the end of the block in force.
	Block(ctx context.Context, key BlockKey, until time.Time) (time.Time, error)
	// Blocked lists the names of kind in scope blocked after now, with
	// the end of each block.
	Blocked(ctx context.Context, kind Kind, scope string, now time.Time) (map[string]time.Time, error)
	// Clear ends key's block if it still ends at seen (as Block or
	// Blocked returned it): a later block another node set since stays.
	// It reports whether it ended one.
	Clear(ctx context.Context, key BlockKey, seen time.Time) (bool, error)
}

// Block extends key's block to until (later wins).
func (s *Store) Block(ctx context.Context, key BlockKey, until time.Time) (time.Time, error) {
	if err := s.blockArgs(key, until); err != nil {
		return time.Time{}, err
	}
	var inForce time.Time
	err := s.pool.QueryRow(ctx, `INSERT INTO musepi_blocks AS b (kind, scope, name, until) VALUES ($1, $2, $3, $4)
		ON CONFLICT (kind, scope, name) DO UPDATE SET until = greatest(b.until, EXCLUDED.until)
		RETURNING until`, key.Kind, key.Scope, key.Name, until).Scan(&inForce)
	if err != nil {
		return time.Time{}, fmt.Errorf("pgstore: block %s: %w", key, err)
	}
	return inForce, nil
}

// Blocked lists the blocks of kind in scope still in force at now.
func (s *Store) Blocked(ctx context.Context, kind Kind, scope string, now time.Time) (map[string]time.Time, error) {
	if err := s.blockArgs(BlockKey{Kind: kind, Scope: scope, Name: "-"}, now); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT name, until FROM musepi_blocks WHERE kind = $1 AND scope = $2 AND until > $3",
		kind, scope, now)
	if err != nil {
		return nil, fmt.Errorf("pgstore: blocked %s %s: %w", kind, scope, err)
	}
	out := map[string]time.Time{}
	var (
		name  string
		until time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &until}, func() error {
		out[name] = until
		return nil
	}); err != nil {
		return nil, fmt.Errorf("pgstore: blocked %s %s: %w", kind, scope, err)
	}
	return out, nil
}

// Clear ends key's block if it still ends at seen.
func (s *Store) Clear(ctx context.Context, key BlockKey, seen time.Time) (bool, error) {
	if err := s.blockArgs(key, seen); err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, "DELETE FROM musepi_blocks WHERE kind = $1 AND scope = $2 AND name = $3 AND until = $4",
		key.Kind, key.Scope, key.Name, seen)
	if err != nil {
		return false, fmt.Errorf("pgstore: clear %s: %w", key, err)
	}
	return tag.RowsAffected() == 1, nil
}

func (s *Store) blockArgs(key BlockKey, t time.Time) error {
	if s.closed.Load() {
		return fmt.Errorf("pgstore: blocks: %w", history.ErrClosed)
	}
	if err := key.valid(); err != nil {
		return err
	}
	if t.IsZero() {
		return errors.New("pgstore: blocks: zero time")
	}
	return nil
}
