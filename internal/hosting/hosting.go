// Package hosting is the seam between a runtime (package musepi) and its
// cluster mode (package cluster): what a runtime that joins a cluster
// needs of its membership, and what the cluster needs of the runtime, as
// interfaces, so that package musepi links no cluster code (protoactor's
// cluster, etcd, gRPC, PostgreSQL) and an embedder who never joins a
// cluster links none either. Package cluster implements Member and Node;
// package musepi implements Runtime, Runner (for its own sessions), Handle
// and Local. Package cluster gets a runtime from musepi.NewHostedRuntime,
// and a runtime's node from musepi.HostedNode.
//
// Runtime, Node and Handle take the session type S, a *musepi.Session
// (which this package cannot name): a node gives a runtime its sessions
// as such, with no type assertion.
package hosting

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/internal/reply"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/pacing"
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
	// Dropped is closed once the cluster dropped the node.
	Dropped() <-chan struct{}
	// Members are the members' addresses as the node last saw them.
	Members() []string
	// Address is the node's own.
	Address() string
}

// Provider is one provider's settings for the cluster's shared actors.
type Provider struct {
	Name        string
	Credentials []actors.Credential
	AutoRedeem  bool
	Budget      retry.BudgetSettings // Enabled false: none
	Pacing      bool                 // turns reserve their need from the keys' rate limits
	Refunds     bool                 // the server gives back unused max_tokens (provider.OutputRefunder)
	StickyWait  time.Duration        // how long a turn waits for its session's key (0: the default)
	Overload    *overload.Settings   // the node's own concurrency limit per model (nil: none)
}

// Settings are what a runtime's options say of the cluster's shared
// actors, for the member its node starts (Runtime.Settings).
type Settings struct {
	Log            *slog.Logger
	FallbackChains map[string][]string
	Providers      []Provider
}

// Runtime is a runtime as its cluster node drives it: package musepi
// implements it, package cluster's node uses it. S is its session type.
type Runtime[S any] interface {
	// Settings are what its options say of the cluster's shared actors.
	Settings() Settings
	// Attach runs the runtime on node, a member of the cluster: its actors
	// on the member's system, its sessions on the cluster's shared actors.
	Attach(node Node[S], m Member)
	// Serve starts what the runtime serves once it is a node: telemetry,
	// and (unless client) the durable timers of the sessions it may host.
	Serve(client bool) error
	System() *actor.ActorSystem
	Log() *slog.Logger
	// Closed reports whether the runtime was shut down.
	Closed() bool
	// AllEvents are the subscribers to every session's events.
	AllEvents() *actors.Fanout
	// NewHandle is the session id as its caller here sees it, wherever it
	// runs: through r.
	NewHandle(id, model string, autoRetry bool, r Runner) Handle[S]
	// Open hosts session id here, as req configures it, on the history
	// that open returns; it fails with musepi.ErrRuntimeClosed once the
	// runtime is shut down.
	Open(id string, req *protocol.SessionOpen, open func() (history.Log, []*messages.Entry, error)) (Local, error)
}

// Node is a runtime's part in its cluster: package cluster implements it,
// the runtime calls it. S is the runtime's session type.
type Node[S any] interface {
	// Handle opens the runtime's handle of a session, wherever the
	// cluster hosts it, and returns its session.
	Handle(ctx context.Context, req HandleRequest) (S, error)
	// Handles are the handles' sessions.
	Handles() []S
	// HandleOf is the handle's session of id, if one is open here.
	HandleOf(id string) (S, bool)
	// LetGo drops the handle of id, leaving the session open where it is.
	LetGo(id string)
	// Watch has the handles' activations relay events while anyone
	// listens.
	Watch()
	// Shutdown leaves the cluster.
	Shutdown(ctx context.Context) error
	// Member is the node's membership.
	Member() Member
}

// HandleRequest is what a runtime's NewSession asks of a handle.
type HandleRequest struct {
	ID, Model, Role string
	Settings        retry.Settings
	Priority        pacing.Priority
	// Steering and Takeover: the session was configured with WithSteering
	// or WithTakeover, which a cluster refuses.
	Steering, Takeover bool
}

// Prompt is a prompt sent to a session and not yet answered: its reply's
// taker, and a reply address it can hold itself.
type Prompt interface {
	reply.Replier
	Register(system *actor.ActorSystem, to reply.Replier) *actor.PID
}

// Runner is where a session runs, and how its messages get there: its
// actor in this runtime, or its activation on whichever node hosts it.
type Runner interface {
	// Prompt sends req; its reply (and PromptAccepted) go to p.
	Prompt(req *protocol.PromptRequest, p Prompt)
	// Deliver runs send with the session's actor, starting it (or opening
	// the session at its activation) if need be; it fails once the
	// session is closed.
	Deliver(send func(*actor.PID)) error
	// Asked records that a request's future went to the actor to (within
	// Deliver's send), and Answered that it came back.
	Asked(future, to *actor.PID)
	Answered(future *actor.PID)
	// Again reports whether a request that got a dead letter from to goes
	// again: the session's activation moved, and the next delivery finds
	// the new one.
	Again(to *actor.PID) bool
	// State is the session's state as callers read it now.
	State() *actors.SessionState
	// Watch has the session's events relayed while anyone listens.
	Watch()
	// IsClosed reports whether the session was closed here.
	IsClosed() bool
	// Close stops the session; CloseHere closes it here after it was
	// handed over, leaving its state to the runtime that opens it next.
	Close(ctx context.Context) error
	CloseHere(ctx context.Context) error
}

// Handle is a session's handle as its Runner uses it. S is the
// runtime's session type.
type Handle[S any] interface {
	ID() string
	// Session is the handle's session.
	Session() S
	// Publish gives ev to the session's subscribers; Listening reports
	// whether it has any.
	Publish(ev *messages.SessionEvent)
	Listening() bool
	// State is the handle's mirror of the session's state.
	State() *actors.SessionState
	// ClosedError is why a call reached no session.
	ClosedError() error
	// Ask sends a request and waits for the reply until ctx ends; Send
	// sends a message.
	Ask(ctx context.Context, msg Request) (any, error)
	Send(msg Request)
}

// Request is a message to a session: wire data, which a cluster forwards
// to the session's node, and an actor message, counted in flight on the
// clock of the runtime that hosts the session.
type Request interface {
	proto.Message
	track.Message
}

// Local is a session this runtime hosts, as the cluster's activation of it
// uses it.
type Local interface {
	// Deliver runs send with the session's actor.
	Deliver(send func(*actor.PID)) error
	// Subscribe relays the session's events to fn until it unsubscribes;
	// Flush waits until the events so far have reached the subscribers.
	Subscribe(fn func(*messages.SessionEvent)) (unsubscribe func())
	Flush(ctx context.Context) error
	Busy() bool
	// StateWire is the session's state as a handle mirrors it.
	StateWire() *protocol.SessionStateReply
	// HandOver hands the session over (musepi.Session.HandOver), Close
	// closes it, CloseHere closes it here without ending its chain (its
	// history is another activation's).
	HandOver(ctx context.Context) error
	Close(ctx context.Context) error
	CloseHere(ctx context.Context) error
}

// OpenAttempts bounds how often a message that found its session's
// activation gone (a dead letter) is sent again.
const OpenAttempts = 5
