package actors

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/internal/dispatch"
	"github.com/musepi/musepi/internal/mailbox"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/session"
	"github.com/musepi/musepi/timers"
)

// Deps is what every session of a runtime shares.
type Deps struct {
	Clock       clock.Clock
	Log         *slog.Logger
	Timers      *timers.Service             // every backoff's timer
	Credentials map[string]*actor.PID       // credentials actor by provider name
	Views       map[string]*CredentialsView // what each credentials actor publishes, by provider name
	Budgets     map[string]*actor.PID       // retry budget (a credentials actor) by provider name
	Paced       map[string]bool             // providers whose credentials actor paces turns (session.Config.Paced)
	Limited     map[string]bool             // providers whose credentials actor keeps an overload limiter (session.Config.Limited)
	QueueWait   time.Duration               // how long a retry waits for a cooling model (session.Config.QueueWait)
	// HighFallback names the roles whose high-priority turns take a
	// fallback with room at once when their model's limit is full
	// (overload.Settings.HighPriorityFallback).
	HighFallback map[string]bool
	Keys         map[string]map[string]string // provider -> credential name -> API key
	Fallbacks    map[string]*actor.PID        // model-fallback actor by role
	Providers    map[string]provider.Provider // by provider name
	Tools        []Tool
	// Compaction runs on context overflow; nil ends the prompt with the
	// overflow error after emitting compaction_required.
	Compaction CompactionHook
	// StreamIdleTimeout ends a stream that sends nothing for this long as a
	// transient "stream stalled" error; 0 turns the watchdog off.
	StreamIdleTimeout time.Duration
	// MaxResponseBytes ends a turn whose streamed output passes this many
	// bytes with an error that is not retried; 0 means no bound.
	MaxResponseBytes int
	// NewSource returns the jitter source of one session's retry chain.
	NewSource func() retry.Source
	// Dispatcher runs the session actors' mailboxes; nil is
	// protoactor's default (a goroutine per mailbox activation).
	Dispatcher actor.Dispatcher
	// Goroutines runs turns, tools and compactions, reusing the goroutines
	// of those that ended; nil starts a goroutine for each.
	Goroutines *dispatch.Spawner
	// Passivation lets a session waiting out a long backoff leave its
	// actors; its zero value turns it off.
	Passivation Passivation

	steps      atomic.Uint64 // the inputs the sessions' cores took (Steps)
	sessions   startedSessions
	sharedOnce sync.Once
	built      sharedState
	watchOnce  sync.Once
	watch      *watchdog
	toolsOnce  sync.Once
	tools      []provider.ToolSpec
}

// Steps is how many inputs the cores of the sessions took, each in one
// Step: the work of their decisions.
func (d *Deps) Steps() uint64 { return d.steps.Load() }

// goroutine runs t on a goroutine of its own (see Goroutines).
func (d *Deps) goroutine(t dispatch.Task) {
	if d.Goroutines != nil {
		d.Goroutines.Go(t)
		return
	}
	go t.Run()
}

// watchdog is the runtime's idle-stream watch (nil when StreamIdleTimeout
// is 0), made on first use.
func (d *Deps) watchdog() *watchdog {
	d.watchOnce.Do(func() {
		if d.StreamIdleTimeout > 0 {
			d.watch = newWatchdog(d.Clock, d.StreamIdleTimeout)
		}
	})
	return d.watch
}

// toolSpecs are the specs of Tools every turn's request carries, made on
// first use and shared (read-only) by the turns, as their context is.
func (d *Deps) toolSpecs() []provider.ToolSpec {
	d.toolsOnce.Do(func() {
		if len(d.Tools) == 0 {
			return
		}
		d.tools = make([]provider.ToolSpec, len(d.Tools))
		for i, t := range d.Tools {
			d.tools[i] = provider.ToolSpec{Name: t.Name, Description: t.Description, SchemaJSON: t.SchemaJSON}
		}
	})
	return d.tools
}

// Passivation is how a session waiting out a backoff of at least After
// leaves its actors: its timer wakes it by session id (Timers),
// it asks its root to Buffer new messages and sends itself a marker; when
// the marker comes every earlier message is handled, and if it still waits
// it gives its root its state (Passivated) and stops. A message buffered
// meanwhile keeps it: the root delivers it and the session stays. The
// root starts the actor again from that state with the next message (the
// wake among them).
type Passivation struct {
	After time.Duration // 0: sessions never passivate
	// Buffer asks the session's root to buffer the messages sent to it
	// from now on; false when it cannot (the session is closing).
	Buffer func(sessionID string) bool
	// Passivated tells the root the session's state is kept (in its
	// PreparedSession): true, the actor may stop; false, messages were
	// buffered meanwhile and are now delivered to it, which stays.
	Passivated func(sessionID string) bool
	// Flush delivers the buffered messages and stops buffering: the
	// session stays (it no longer waits).
	Flush func(sessionID string)
}

// sharedState is what every session actor of a runtime shares, built
// once from the Deps on first use.
type sharedState struct {
	session       *actor.Props    // what they are spawned from
	credentialed  map[string]bool // the providers with a credentials actor (session.Config.Credentialed)
	budgeted      map[string]bool // the providers with a retry budget (session.Config.Budgeted)
	fallbackRoles map[string]bool // the roles with a model-fallback actor (session.Config.FallbackRoles)
	paced         map[string]bool // the providers whose turns are paced (session.Config.Paced)
	limited       map[string]bool // the providers with an overload limiter (session.Config.Limited)
}

// shared builds the shared state on first use: the actors' own mailbox on
// the clock, and the dispatcher if set.
func (d *Deps) shared() *sharedState {
	d.sharedOnce.Do(func() {
		opts := []actor.PropsOption{mailbox.Option(d.Clock)}
		if d.Dispatcher != nil {
			opts = append(opts, actor.WithDispatcher(d.Dispatcher))
		}
		d.built.session = actor.PropsFromProducer(func() actor.Actor { return &SessionActor{deps: d} }, opts...)
		d.built.credentialed = present(d.Credentials)
		d.built.budgeted = present(d.Budgets)
		d.built.fallbackRoles = present(d.Fallbacks)
		d.built.paced = map[string]bool{}
		for name, on := range d.Paced {
			d.built.paced[name] = on && d.Credentials[name] != nil
		}
		d.built.limited = map[string]bool{}
		for name, on := range d.Limited {
			d.built.limited[name] = on && d.Credentials[name] != nil
		}
	})
	return &d.built
}

// present is the names that pids has a PID for.
func present(pids map[string]*actor.PID) map[string]bool {
	out := make(map[string]bool, len(pids))
	for name, pid := range pids {
		out[name] = pid != nil
	}
	return out
}

// Tool is a Go function the model may call (musepi.WithTools, which
// names it musepi.Tool).
type Tool struct {
	Name        string // unique among the runtime's tools, not empty
	Description string // what the tool does, for the model
	SchemaJSON  string // JSON schema of the arguments object
	// Run runs one call with its arguments (a JSON object) and returns the
	// output the model sees; an error is shown to the model as a failed
	// call. ctx ends when the prompt is aborted.
	Run func(ctx context.Context, argsJSON string) (string, error)
}

// CompactionHook shrinks a session's context that overflowed the model's
// window. It returns the new context, after which the session continues the
// prompt, or an error that ends the prompt. A manual compaction
// (Session.Compact, the RPC's compact) calls it between prompts with a nil
// failed message.
type CompactionHook func(ctx context.Context, sessionID string, context []*messages.Entry, failed *messages.AssistantMessage) ([]*messages.Entry, error)

// knownModel reports whether a "provider/model" names a registered provider.
func (d *Deps) knownModel(model string) bool {
	_, ok := d.Providers[providerOf(model)]
	return ok
}

// SessionConfig is one session's own configuration.
type SessionConfig struct {
	ID string
	// History is the session's open history, closed when the actor stops;
	// Restored is what it held when opened.
	History  history.Log
	Restored []*messages.Entry

	Model string // primary "provider/model"
	Role  string // model role for fallback chains ("default")
	// Settings are the session's retry settings, shared (a runtime's
	// sessions have the same) and never changed.
	Settings *retry.Settings
	Events   *Fanout // the session's subscribers
	// AllEvents are the runtime-wide subscribers, who get every session's
	// events too (nil: none).
	AllEvents *Fanout
	State     *SessionState
	// Steering, when set, gives the steering messages to add after a
	// turn's tool results, before the next turn (see musepi.WithSteering).
	Steering func() []string
	// Priority orders the session's turns among those that wait for a
	// rate-limit budget (pacing).
	Priority pacing.Priority
}

// SessionState mirrors what callers may read without asking the actor:
// the actor publishes it, and callers only read it (a handle's mirror of a
// session hosted elsewhere is set from the hosting actor's, SetWire).
type SessionState struct {
	autoRetry  atomic.Bool
	retrying   atomic.Bool
	busy       atomic.Bool
	compacting atomic.Bool
	state      atomic.Uint32 // the core's session.State (the wire's phase)
	retryAt    atomic.Int64  // Unix ns when the backoff's timer fires (0: not in backoff)
	generation atomic.Uint64
	model      atomic.Pointer[string]
	thinking   atomic.Pointer[provider.ThinkingLevel]
	noAutoComp atomic.Bool   // auto-compaction switched off
	priority   atomic.Uint32 // pacing.Priority of the session's turns
}

// AutoCompaction reports whether the hook runs on context overflow.
func (s *SessionState) AutoCompaction() bool { return !s.noAutoComp.Load() }

// Priority is the pacing priority of the session's turns.
func (s *SessionState) Priority() pacing.Priority { return pacing.Priority(s.priority.Load()) }

// setThinkingLevel publishes the thinking level the session's next turns
// ask for.
func (s *SessionState) setThinkingLevel(l provider.ThinkingLevel) { s.thinking.Store(&l) }

// ThinkingLevel is the thinking level of the session's turns.
func (s *SessionState) ThinkingLevel() provider.ThinkingLevel {
	if l := s.thinking.Load(); l != nil {
		return *l
	}
	return provider.ThinkingOff
}

// Init sets the state a new session starts with.
func (s *SessionState) Init(model string, autoRetry bool) {
	s.model.Store(&model)
	s.autoRetry.Store(autoRetry)
}

// AutoRetryEnabled reports retry.enabled.
func (s *SessionState) AutoRetryEnabled() bool { return s.autoRetry.Load() }

// IsRetrying reports whether the retry lifecycle is open.
func (s *SessionState) IsRetrying() bool { return s.retrying.Load() }

// Phase is what the session is doing: its core's state ("idle",
// "streaming", "backoff", ...).
func (s *SessionState) Phase() string { return session.State(s.state.Load()).Phase() }

// RetryAt is when the session's backoff ends and its next attempt is due
// (zero: not in a backoff).
func (s *SessionState) RetryAt() time.Time {
	if ns := s.retryAt.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Compacting reports whether the compaction hook runs (on overflow, or a
// manual compaction).
func (s *SessionState) Compacting() bool { return s.compacting.Load() }

// Busy reports whether a prompt is in progress.
func (s *SessionState) Busy() bool { return s.busy.Load() }

// Generation is the current prompt generation.
func (s *SessionState) Generation() uint64 { return s.generation.Load() }

// Model is the "provider/model" the session uses now.
func (s *SessionState) Model() string {
	if m := s.model.Load(); m != nil {
		return *m
	}
	return ""
}

// Wire is the state as a SessionStateReply, for a session handle on
// another node.
func (s *SessionState) Wire() *protocol.SessionStateReply {
	return &protocol.SessionStateReply{Busy: s.Busy(), Retrying: s.IsRetrying(), AutoRetry: s.AutoRetryEnabled(),
		Phase: s.state.Load(), RetryAtUnixNano: s.retryAt.Load(), Generation: s.Generation(), Model: s.Model(),
		ThinkingLevel: string(s.ThinkingLevel()), Compacting: s.Compacting(), AutoCompaction: s.AutoCompaction()}
}

// SetWire sets the state from a SessionStateReply: the mirror a session
// handle keeps of a session hosted on another node.
func (s *SessionState) SetWire(w *protocol.SessionStateReply) {
	s.busy.Store(w.GetBusy())
	s.retrying.Store(w.GetRetrying())
	s.autoRetry.Store(w.GetAutoRetry())
	s.state.Store(w.GetPhase())
	s.retryAt.Store(w.GetRetryAtUnixNano())
	s.generation.Store(w.GetGeneration())
	model := w.GetModel()
	s.model.Store(&model)
	s.setThinkingLevel(provider.ThinkingLevel(w.GetThinkingLevel()))
	s.compacting.Store(w.GetCompacting())
	s.noAutoComp.Store(!w.GetAutoCompaction())
}

func providerOf(selector string) string {
	p, _, _ := retry.SplitModel(selector)
	return p
}

func modelOf(selector string) string {
	_, m, _ := retry.SplitModel(selector)
	return m
}

// startedSessions are the sessions whose actor lives, by actor name: what
// an actor finds when it starts (again after a panic).
type startedSessions struct {
	mu     sync.Mutex
	byName map[string]*PreparedSession
}

func (m *startedSessions) store(name string, p *PreparedSession) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byName == nil {
		m.byName = map[string]*PreparedSession{}
	}
	m.byName[name] = p
}

func (m *startedSessions) load(name string) *PreparedSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byName[name]
}

// remove forgets name if it still names p (a session closed and opened
// again under the same name has a new one).
func (m *startedSessions) remove(name string, p *PreparedSession) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byName[name] == p {
		delete(m.byName, name)
	}
}
