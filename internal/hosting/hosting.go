// Package hosting is the seam between a runtime (package musepi) and
// its cluster mode (package cluster): what a runtime that joins a cluster
// needs of its membership and of the shared store, as interfaces, so that
// package musepi links no cluster code (protoactor's cluster, etcd, gRPC,
// PostgreSQL) and an embedder who never joins a cluster links none either.
// Package cluster implements Member and Store; package musepi sets Join.
package hosting

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// Member is a node's membership in its cluster, as its runtime uses it.
type Member interface {
	// System is the node's actor system.
	System() *actor.ActorSystem
	// Wire points deps at the cluster's shared actors (the credentials
	// and fallback kinds, through the node's routers).
	Wire(deps *actors.Deps)
	// CooldownView is the node's view of role's model cooldowns (nil: no
	// such role).
	CooldownView(role string) *actors.CooldownView
	// Session is the activation of session id (the session kind),
	// activating it if need be; nil when the lookup failed.
	Session(id string) *actor.PID
	// ForgetSession drops stale, session id's activation as last looked
	// up, so the next lookup asks again.
	ForgetSession(id string, stale *actor.PID)
	// Identity is the session id of an activation of the session kind,
	// from its context.
	Identity(ctx actor.Context) string
	// OnLeft calls fn, from the topology's events, with the address of
	// each member that leaves the cluster.
	OnLeft(fn func(addr string))
	// RequestTimeout bounds one request to another member.
	RequestTimeout() time.Duration
	// Incarnations are the member ids at addr now (a node restarted at the
	// same address has a new one).
	Incarnations(addr string) []string
	// Listed reports whether any of ids is a member now.
	Listed(ids []string) bool
	// Sure reports whether the node is sure of its membership now;
	// Settle waits, until ctx ends, until it knows where it stands.
	Sure() bool
	Settle(ctx context.Context)
	// Dropped is closed once the cluster dropped the node.
	Dropped() <-chan struct{}
	// Members are the members' addresses as the node last saw them.
	Members() []string
	// Address is the node's own.
	Address() string
	// Leave leaves the cluster.
	Leave() error
}

// Store is the cluster's shared history store.
type Store interface {
	history.Store
	// OpenLog opens session's history, taking a new epoch; it fails with
	// history.ErrLocked while another node holds the session.
	OpenLog(ctx context.Context, session string) (Log, []*messages.Entry, error)
	// TakeoverLog takes session's history from its holder.
	TakeoverLog(ctx context.Context, session string) (Log, []*messages.Entry, error)
}

// Log is a session's history in the shared store, held by its epoch.
type Log interface {
	history.RecordLog
	history.Holder
	// Verify asks the store whether the session is still this log's.
	Verify(ctx context.Context) error
	// Session is the session's id.
	Session() string
}

// Provider is one provider's settings for the cluster's shared actors.
type Provider struct {
	Name        string
	Credentials []actors.Credential
	AutoRedeem  bool
	Budget      retry.BudgetSettings // Enabled false: none
}

// Settings are what a runtime's options say of the cluster's shared
// actors, for the member it starts.
type Settings struct {
	Log            *slog.Logger
	FallbackChains map[string][]string
	Providers      []Provider
}

// Config is how a runtime joins a cluster.
type Config struct {
	Store           Store
	HandoverTimeout time.Duration
	// Client: the node hosts no activations.
	Client bool
	// Start starts the node's member with the runtime's settings; sessions
	// makes the session kind's activations (nil for a client).
	Start func(s Settings, sessions *actor.Props) (Member, error)
}

// Join starts a runtime (a *musepi.Runtime, returned as any) that joins a
// cluster as cfg says, with the options opts (a []musepi.Option); package
// musepi sets it.
var Join func(ctx context.Context, cfg Config, opts any) (any, error)

// MemberOf is the member of a runtime of Join (nil for another); package
// musepi sets it.
var MemberOf func(rt any) Member
