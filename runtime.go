package musepi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/internal/dispatch"
	"github.com/musepi/musepi/internal/hosting"
	"github.com/musepi/musepi/internal/loglevel"
	"github.com/musepi/musepi/internal/plaintext"
	"github.com/musepi/musepi/internal/reply"
	"github.com/musepi/musepi/internal/telemetry"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/timers"
)

// Runtime hosts sessions: one actor system, one timer service for every
// backoff, one credentials actor per provider and one model-fallback actor
// per role.
type Runtime struct {
	cfg    runtimeConfig
	system *actor.ActorSystem
	deps   *actors.Deps
	store  history.Store
	pids   []*actor.PID   // runtime-wide actors, stopped last
	pool   *dispatch.Pool // runs every actor's mailbox

	allEvents     *actors.Fanout       // runtime-wide subscribers: every session's events
	sessionEvents *actors.FanoutConfig // what each session's own fan-out delivers by

	credViews     map[string]*actors.CredentialsView // per provider, for Stats
	cooldownViews []*actors.CooldownView             // per role, for Stats
	telemetry     *telemetry.Telemetry               // nil without WithMeterProvider and WithTracerProvider
	unobserve     func()                             // unsubscribes the telemetry
	deliveries    *deliveries                        // the runtime-wide fan-out's deliveries in flight (with telemetry)
	timers        *timers.Service                    // every backoff's timer; claims due sessions on a TimerStore

	// cluster is the runtime's part in a cluster (cluster.Join; nil: one
	// machine). The sessions map then holds the sessions it hosts.
	cluster hosting.Node[*Session]

	mu       sync.Mutex
	sessions map[string]*Session
	closed   bool
	inFlight atomic.Int64 // prompts running
	seedMu   sync.Mutex
	seeds    *mrand.Rand
}

// DefaultStreamIdleTimeout is how long a stream may send nothing before its
// watchdog ends it as "stream stalled".
const DefaultStreamIdleTimeout = 120 * time.Second

// ErrLimitExceeded is what a *LimitError matches with errors.Is.
var ErrLimitExceeded = errors.New("musepi: limit exceeded")

// LimitError says which limit of Limits a call ran into.
type LimitError struct {
	Limit string // "sessions", "prompts in flight", "prompt bytes"
	Max   int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("musepi: limit exceeded: at most %d %s", e.Max, e.Limit)
}

// Is matches ErrLimitExceeded.
func (e *LimitError) Is(target error) bool { return target == ErrLimitExceeded }

// ErrRuntimeClosed is returned once Shutdown has begun.
var ErrRuntimeClosed = errors.New("musepi: runtime is shut down")

// maxWaitingGoroutines is how many goroutines of ended turns a runtime
// keeps for the next turns (each a few KB of stack).
const maxWaitingGoroutines = 256

// NewRuntime starts a runtime with opts. It refuses options that cannot
// apply with an error naming the option, and a fallback target whose
// provider is not registered.
func NewRuntime(opts ...Option) (*Runtime, error) {
	rt, err := newRuntime(opts)
	if err != nil {
		return nil, err
	}
	cfg := rt.cfg
	rt.system = actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			// protoactor-go logs through log/slog too, into the same
			// handler, at warning and above (its info lines are dead
			// letters of aborted streams and the like).
			return slog.New(loglevel.AtLeast(cfg.log.Handler(), slog.LevelWarn)).With("lib", "protoactor")
		}),
		// Dead letters (a stream finishing after its session stopped) are
		// expected at shutdown; a short window keeps protoactor's throttle
		// goroutine from outliving the runtime by a second.
		actor.WithDeadLetterThrottleInterval(50*time.Millisecond),
	)
	rt.start(rt.spawnShared)
	if err := rt.startTelemetry(); err != nil {
		_ = rt.Shutdown(context.Background())
		return nil, fmt.Errorf("musepi: %w", err)
	}
	rt.startTimers()
	return rt, nil
}

// newRuntime validates opts and opens the history store: a runtime with
// no actor system yet.
func newRuntime(opts []Option) (*Runtime, error) {
	cfg := runtimeConfig{
		clock:       clock.Real{},
		log:         slog.New(zerolog.NewSlogHandler(zerolog.New(os.Stderr).Level(zerolog.WarnLevel).With().Timestamp().Logger())),
		providers:   map[string]provider.Provider{},
		creds:       map[string][]Credential{},
		settings:    retry.DefaultSettings(),
		pacing:      true,
		streamIdle:  DefaultStreamIdleTimeout,
		passivate:   DefaultPassivateAfter,
		timerPoll:   DefaultTimerPoll,
		maxResponse: DefaultMaxResponseBytes,
		limits:      DefaultLimits,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	store, err := cfg.historyStore()
	if err != nil {
		return nil, err
	}
	if !cfg.seeded {
		cfg.seed = mrand.Uint64()
	}
	rt := &Runtime{
		cfg:       cfg,
		store:     store,
		sessions:  map[string]*Session{},
		credViews: map[string]*actors.CredentialsView{},
		seeds:     mrand.New(mrand.NewPCG(cfg.seed, 0x6d757365)),
	}
	rt.allEvents = actors.NewFanout(rt.eventsClock(), cfg.log, cfg.queueLen)
	rt.sessionEvents = actors.NewFanoutConfig(cfg.clock, cfg.log, cfg.queueLen)
	return rt, nil
}

// check reports the options that failed, and settings, fallback chains
// and credentials that do not fit together.
func (cfg *runtimeConfig) check() error {
	if err := errors.Join(cfg.optionErrs...); err != nil {
		return fmt.Errorf("musepi: %w", err)
	}
	if err := cfg.settings.Validate(); err != nil {
		return fmt.Errorf("musepi: %w", err)
	}
	for role, chain := range cfg.settings.FallbackChains {
		for i, m := range chain {
			if p, _, _ := retry.SplitModel(m); cfg.providers[p] == nil {
				return fmt.Errorf("musepi: WithRetrySettings: retry.fallbackChains.%s[%d] %q: unknown fallback target: no provider %q (WithProvider)", role, i, m, p)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.creds)) {
		if err := cfg.resolveCredentials(name); err != nil {
			return fmt.Errorf("musepi: WithProvider(%q): %w", name, err)
		}
	}
	return nil
}

// resolveCredentials checks the names and keys of provider name's
// credentials and reads the keys of those that name an environment
// variable (Credential.APIKeyEnv) into APIKey.
func (cfg *runtimeConfig) resolveCredentials(name string) error {
	seen := map[string]bool{}
	for i := range cfg.creds[name] {
		c := &cfg.creds[name][i]
		if c.Name == "" || seen[c.Name] {
			return fmt.Errorf("credential %d: empty or duplicate name %q", i, c.Name)
		}
		seen[c.Name] = true
		key, err := credentialKey(c)
		if err != nil {
			return fmt.Errorf("credential %q: %w", c.Name, err)
		}
		c.APIKey, c.APIKeyEnv = key, ""
	}
	return nil
}

// credentialKey is c's API key: APIKey, or the value of the variable
// APIKeyEnv names; an error when there is none.
func credentialKey(c *Credential) (string, error) {
	switch {
	case c.APIKey != "" && c.APIKeyEnv != "":
		return "", errors.New("both APIKey and APIKeyEnv are set: give one")
	case c.APIKeyEnv != "":
		val, ok := os.LookupEnv(c.APIKeyEnv)
		switch val = strings.TrimSpace(val); {
		case !ok:
			return "", fmt.Errorf("APIKeyEnv: environment variable %s is not set", c.APIKeyEnv)
		case val == "":
			return "", fmt.Errorf("APIKeyEnv: environment variable %s is empty", c.APIKeyEnv)
		}
		return val, nil
	case strings.TrimSpace(c.APIKey) == "":
		return "", errors.New("empty API key (set APIKey, or APIKeyEnv to the environment variable holding it; a server that needs no key takes no credentials)")
	}
	return c.APIKey, nil
}

// historyStore is the store the options name: WithHistoryStore's, a file
// store in WithHistoryDir's directory, else one in memory.
func (cfg *runtimeConfig) historyStore() (history.Store, error) {
	if cfg.store != nil {
		return cfg.store, nil
	}
	if cfg.historyDir != "" {
		fs, err := history.OpenFileStore(cfg.historyDir, history.WithSync(cfg.historySync), history.WithLogger(cfg.log))
		if err != nil {
			return nil, fmt.Errorf("musepi: %w", err)
		}
		return fs, nil
	}
	return history.NewMemoryStore(), nil
}

// start makes the deps the sessions share on rt.system: the dispatcher
// pool and the timer service, then the credentials and fallback actors
// through shared.
func (rt *Runtime) start(shared func(deps *actors.Deps, onPool actor.PropsOption)) {
	cfg := rt.cfg
	deps := &actors.Deps{
		Clock:       cfg.clock,
		Log:         cfg.log,
		Credentials: map[string]*actor.PID{},
		Views:       rt.credViews,
		Budgets:     map[string]*actor.PID{},
		Keys:        map[string]map[string]string{},
		Fallbacks:   map[string]*actor.PID{},
		Providers:   cfg.providers,
		Tools:       cfg.tools,
		Compaction:  cfg.compaction.wire(),
		NewSource:   rt.newSource,

		StreamIdleTimeout: cfg.streamIdle,
		MaxResponseBytes:  cfg.maxResponse,
	}
	if cfg.pacing {
		deps.Paced = map[string]bool{}
		for name := range cfg.providers {
			deps.Paced[name] = len(cfg.creds[name]) > 0 // pacing spends keys' budgets
		}
	}
	if cfg.overload != nil {
		deps.Limited = map[string]bool{}
		for name := range cfg.providers {
			deps.Limited[name] = true
		}
		deps.QueueWait = max(cfg.overload.WithDefaults().MaxQueueWait, 0)
		deps.HighFallback = map[string]bool{}
		for _, role := range cfg.overload.HighPriorityFallback {
			deps.HighFallback[role] = true
		}
	}
	rt.pool = dispatch.NewPool(max(8, 4*runtime.GOMAXPROCS(0)), 300)
	deps.Dispatcher = rt.pool
	deps.Goroutines = dispatch.NewSpawner(maxWaitingGoroutines)
	onPool := actor.WithDispatcher(rt.pool)
	rt.timers = timers.New(cfg.clock, rt.deliverDue)
	deps.Timers = rt.timers
	shared(deps, onPool)
	deps.Passivation = rt.passivation()
	rt.deps = deps
}

// spawnShared spawns the runtime's own credentials actor per provider and
// fallback actor per role (one machine). A provider without credentials
// has one only for its retry budget or its overload limiter; with the
// limiter, its sessions ask it for their places (and get no key: the
// provider's own).
func (rt *Runtime) spawnShared(deps *actors.Deps, onPool actor.PropsOption) {
	cfg := rt.cfg
	root := rt.system.Root
	for name := range cfg.providers {
		creds := cfg.creds[name]
		if len(creds) == 0 && !cfg.settings.Budget.Enabled && cfg.overload == nil {
			continue
		}
		actorCreds := cfg.actorCredentials(name)
		view := actors.NewCredentialsView(actorCreds)
		rt.credViews[name] = view
		policy := actors.CredentialsPolicy{AutoRedeem: cfg.autoRedeem, Budget: cfg.settings.Budget, Pacing: cfg.pacing,
			Refunds: cfg.refunds(name), Provider: name, StickyWait: cfg.stickyWait, Overload: cfg.overload}
		pid := root.Spawn(actors.CredentialsProps(cfg.clock, actorCreds, policy, view, onPool))
		rt.pids = append(rt.pids, pid)
		if cfg.settings.Budget.Enabled {
			deps.Budgets[name] = pid
		}
		if len(creds) == 0 {
			if cfg.overload != nil {
				deps.Credentials[name] = pid
			}
			continue
		}
		keys := map[string]string{}
		for _, c := range creds {
			keys[c.Name] = c.APIKey
		}
		deps.Keys[name] = keys
		deps.Credentials[name] = pid
	}
	for role, chain := range cfg.settings.FallbackChains {
		view := &actors.CooldownView{}
		rt.cooldownViews = append(rt.cooldownViews, view)
		pid := root.Spawn(actors.FallbackProps(cfg.clock, role, chain, view, onPool))
		deps.Fallbacks[role] = pid
		rt.pids = append(rt.pids, pid)
	}
}

// refunds reports whether provider name's server gives back the output
// max_tokens reserved and a call did not use (provider.OutputRefunder).
func (c *runtimeConfig) refunds(name string) bool {
	r, ok := c.providers[name].(provider.OutputRefunder)
	return ok && r.RefundsUnusedOutput()
}

// actorCredentials are provider's credentials as its credentials actor
// holds them: a credential without rate limits of its own takes the
// provider's (WithRateLimits).
func (c *runtimeConfig) actorCredentials(provider string) []actors.Credential {
	out := slices.Clone(c.creds[provider])
	for i := range out {
		if !out[i].RateLimits.Any() {
			out[i].RateLimits = c.rateLimits[provider]
		}
	}
	return out
}

// newSource gives each session's retry chain its own jitter source, drawn
// from the runtime seed (one heap object per session).
func (rt *Runtime) newSource() retry.Source {
	if rt.cfg.newSource != nil {
		return rt.cfg.newSource()
	}
	rt.seedMu.Lock()
	defer rt.seedMu.Unlock()
	return retry.NewPCGSource(rt.seeds.Uint64(), rt.seeds.Uint64())
}

// CheckPrompt returns the *LimitError a prompt of text would fail with for
// its size (Limits.PromptBytes), or nil. Front ends that acknowledge a
// prompt before it runs, like the RPC server, check it first.
func (rt *Runtime) CheckPrompt(text string) error {
	if max := rt.cfg.limits.PromptBytes; max > 0 && len(text) > max {
		return &LimitError{Limit: "prompt bytes", Max: max}
	}
	return nil
}

// NewSession starts a session. On a runtime of cluster.Join it creates or
// reaches the session wherever the cluster hosts it (see docs/cluster.md).
func (rt *Runtime) NewSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := sessionConfig{role: "default"}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.id == "" {
		cfg.id = newID()
	}
	settings, err := rt.checkSession(cfg)
	if err != nil {
		return nil, err
	}
	if rt.cluster != nil {
		return rt.cluster.Handle(ctx, hosting.HandleRequest{ID: cfg.id, Model: cfg.model, Role: cfg.role, Settings: *settings,
			Priority: cfg.priority, Steering: cfg.steering != nil, Takeover: cfg.open != nil})
	}
	open := func() (history.Log, []*messages.Entry, error) { return rt.store.Open(cfg.id) }
	if cfg.open != nil {
		open = func() (history.Log, []*messages.Entry, error) { return cfg.open(ctx, cfg.id) }
	}
	return rt.openLocal(cfg, settings, open)
}

// checkSession validates a session's configuration and returns its retry
// settings: the runtime's, or the session's own (WithSessionRetrySettings),
// shared by its actor and never changed.
func (rt *Runtime) checkSession(cfg sessionConfig) (*retry.Settings, error) {
	settings := &rt.cfg.settings
	if strings.TrimSpace(cfg.role) == "" {
		return nil, fmt.Errorf("musepi: WithRole: empty role")
	}
	if cfg.priority > Low {
		return nil, fmt.Errorf("musepi: WithPriority(%d): want High, Normal or Low", cfg.priority)
	}
	if !history.ValidSessionID(cfg.id) {
		return nil, fmt.Errorf("musepi: session id %q: use 1-128 letters, digits, '-', '_' or '.'", cfg.id)
	}
	if err := plaintext.Check("session model", cfg.model); err != nil {
		return nil, fmt.Errorf("musepi: %w", err)
	}
	prov, _, ok := retry.SplitModel(cfg.model)
	if !ok {
		return nil, fmt.Errorf("musepi: session model %q: want \"provider/model\" (WithModel)", cfg.model)
	}
	if _, ok := rt.cfg.providers[prov]; !ok {
		return nil, fmt.Errorf("musepi: session model %q: unknown provider %q (have %v)", cfg.model, prov, rt.providerNames())
	}
	if cfg.settings != nil {
		if err := cfg.settings.Validate(); err != nil {
			return nil, fmt.Errorf("musepi: session %s: %w", cfg.id, err)
		}
		if len(cfg.settings.FallbackChains) > 0 && !maps.EqualFunc(cfg.settings.FallbackChains, settings.FallbackChains, slices.Equal) {
			// The fallback actors, and the cooldowns they keep, are the
			// runtime's: one per role, shared by its sessions.
			return nil, fmt.Errorf("musepi: session %s: WithSessionRetrySettings: fallback chains are runtime-wide (one fallback actor per role, shared cooldowns); set them with WithRetrySettings", cfg.id)
		}
		settings = cfg.settings
	}
	return settings, nil
}

// openLocal starts a session whose actor runs in this process, on the
// history open returns.
func (rt *Runtime) openLocal(cfg sessionConfig, settings *retry.Settings, open func() (history.Log, []*messages.Entry, error)) (*Session, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return nil, ErrRuntimeClosed
	}
	if max := rt.cfg.limits.Sessions; max > 0 && len(rt.sessions) >= max {
		return nil, &LimitError{Limit: "sessions", Max: max}
	}
	if _, dup := rt.sessions[cfg.id]; dup {
		return nil, fmt.Errorf("musepi: session %q is already running", cfg.id)
	}
	s := &Session{id: cfg.id, rt: rt, state: &actors.SessionState{}}
	s.local.s, s.at = s, &s.local
	s.events.Init(rt.sessionEvents)
	log, entries, err := open()
	if err != nil {
		return nil, fmt.Errorf("musepi: open session %s: %w", cfg.id, err)
	}
	all := rt.allEvents
	if rt.cluster != nil {
		all = nil // the handles relay the events to their runtimes' subscribers
	}
	s.local.prepared, err = actors.PrepareSession(rt.deps, actors.SessionConfig{
		ID: cfg.id, History: log, Restored: entries, Model: cfg.model, Role: cfg.role, Settings: settings, Events: &s.events, AllEvents: all, State: s.state,
		Steering: cfg.steering, Priority: cfg.priority,
	})
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("musepi: start session %s: %w", cfg.id, err)
	}
	rt.sessions[cfg.id] = s
	if s.local.prepared.Resumes() {
		// Its retry chain goes on from its record: its actor starts now and
		// arms the chain's timer.
		s.local.start.Lock()
		pid, err := s.local.actorLocked()
		s.local.start.Unlock()
		if err != nil {
			delete(rt.sessions, cfg.id)
			_ = s.local.prepared.Drop()
			return nil, err
		}
		track.Send(rt.system.Root, rt.cfg.clock, pid, &actors.ResumeChain{})
	}
	return s, nil
}

func (rt *Runtime) providerNames() []string {
	names := make([]string, 0, len(rt.cfg.providers))
	for n := range rt.cfg.providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// lookup is the open session id, or nil.
func (rt *Runtime) lookup(id string) *Session {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.sessions[id]
}

// deliverDue delivers a backoff's end from the timer service to the
// session id: to its actor to, or by id when it left its actors while it
// waited (passivated), starting it again.
func (rt *Runtime) deliverDue(id string, to *actor.PID, due *timers.Due) {
	if to != nil {
		track.Send(rt.system.Root, rt.cfg.clock, to, due)
		return
	}
	if s := rt.lookup(id); s != nil {
		_ = s.deliver(func(pid *actor.PID) { track.Send(rt.system.Root, rt.cfg.clock, pid, due) })
	}
}

// passivation is how the runtime's sessions leave their actors while they
// wait (see actors.Passivation).
func (rt *Runtime) passivation() actors.Passivation {
	if rt.cfg.passivate <= 0 {
		return actors.Passivation{}
	}
	return actors.Passivation{
		After: rt.cfg.passivate,
		Buffer: func(id string) bool {
			s := rt.lookup(id)
			return s != nil && s.local.buffer()
		},
		Passivated: func(id string) bool {
			s := rt.lookup(id)
			return s != nil && s.local.passivated()
		},
		Flush: func(id string) {
			if s := rt.lookup(id); s != nil {
				s.local.flush()
			}
		},
	}
}

func (rt *Runtime) forget(id string) {
	rt.mu.Lock()
	delete(rt.sessions, id)
	rt.mu.Unlock()
}

// Sessions returns the runtime's open sessions, by id (on a runtime of
// cluster.Join: the sessions opened through it, wherever they are hosted).
func (rt *Runtime) Sessions() []*Session {
	if rt.cluster != nil {
		out := rt.cluster.Handles()
		slices.SortFunc(out, func(a, b *Session) int { return strings.Compare(a.id, b.id) })
		return out
	}
	return rt.local()
}

// local are the sessions whose actors run in this process, by id.
func (rt *Runtime) local() []*Session {
	rt.mu.Lock()
	out := make([]*Session, 0, len(rt.sessions))
	for _, s := range rt.sessions {
		out = append(out, s)
	}
	rt.mu.Unlock()
	slices.SortFunc(out, func(a, b *Session) int { return strings.Compare(a.id, b.id) })
	return out
}

// Session returns the open session with id (on a runtime of cluster.Join:
// its handle, if opened through this runtime).
func (rt *Runtime) Session(id string) (*Session, bool) {
	if rt.cluster != nil {
		return rt.cluster.HandleOf(id)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	s, ok := rt.sessions[id]
	return s, ok
}

// Subscribe calls fn with the events of every session of the runtime
// (Event.SessionID says whose; on a runtime of cluster.Join, the sessions
// opened through it), each session's in order, from a goroutine
// of its own, with the same bounded delivery as Session.Subscribe: a slow
// fn never blocks a session, and falling behind it misses deltas first,
// never a terminal event. The returned function unsubscribes.
func (rt *Runtime) Subscribe(fn func(Event)) (unsubscribe func()) {
	unsub := rt.allEvents.Subscribe(goEvents(fn))
	if rt.cluster == nil {
		return unsub
	}
	rt.cluster.Watch() // the handles' activations relay events while anyone listens
	return func() {
		unsub()
		rt.cluster.Watch()
	}
}

// Stats is a view of the runtime as a whole.
type Stats struct {
	Sessions int            // open sessions
	ByPhase  map[string]int // open sessions by what they do: "idle", "streaming", "backoff", ...
	// Retrying is the number of retry chains open: sessions whose chain
	// has started and not ended (in a backoff, or running an attempt).
	Retrying int
	Busy     int // sessions with a prompt running
	// WaitingUntil is the earliest moment a session in a backoff makes its
	// next attempt (zero: none waits).
	WaitingUntil time.Time
	// CredentialsBlocked is, per provider, how many of its credentials a
	// usage limit blocks now (providers with none blocked are left out).
	CredentialsBlocked map[string]int
	// ModelsCoolingDown are the "provider/model" selectors cooling down
	// after failures, which fallback skips, sorted.
	ModelsCoolingDown []string
	// BudgetTokens is, per provider, its retry budget's tokens (only with
	// retry.budget.enabled; see RetryBudget).
	BudgetTokens map[string]float64
	// Steps counts the inputs the sessions' cores have taken since the
	// runtime started, each in one Step: the work of their decisions (a
	// plain retry attempt takes 2, BenchmarkRetryAttempt).
	Steps uint64
}

// Stats counts the runtime's sessions by what they do now (on a runtime of
// cluster.Join: the sessions this node hosts), and reads the state of its
// credentials, fallback chains and retry budgets.
func (rt *Runtime) Stats() Stats {
	now := rt.cfg.clock.Now()
	st := Stats{ByPhase: map[string]int{}, CredentialsBlocked: map[string]int{}, BudgetTokens: map[string]float64{},
		Steps: rt.deps.Steps()}
	for _, s := range rt.local() {
		st.Sessions++
		st.ByPhase[s.state.Phase()]++
		if s.state.IsRetrying() {
			st.Retrying++
		}
		if s.state.Busy() {
			st.Busy++
		}
		if at := s.state.RetryAt(); !at.IsZero() && (st.WaitingUntil.IsZero() || at.Before(st.WaitingUntil)) {
			st.WaitingUntil = at
		}
	}
	for name, v := range rt.credViews {
		if n := v.Blocked(now); n > 0 {
			st.CredentialsBlocked[name] = n
		}
		if tokens, ok := v.BudgetTokens(); ok {
			st.BudgetTokens[name] = tokens
		}
	}
	for _, v := range rt.cooldownViews {
		st.ModelsCoolingDown = append(st.ModelsCoolingDown, v.CoolingDown(now)...)
	}
	slices.Sort(st.ModelsCoolingDown)
	st.ModelsCoolingDown = slices.Compact(st.ModelsCoolingDown)
	return st
}

// Shutdown stops every session (a waiting Prompt returns ErrShutdown), then
// the runtime's actors, and closes the history store. It waits for the
// actors to stop until ctx ends.
//
// On a runtime of cluster.Join it is a graceful leave: its handles let go
// of their sessions (a Prompt waiting through one returns ErrShutdown),
// the node leaves the cluster, and each session it hosts is handed over:
// once at rest (idle, or waiting out a backoff; a turn in flight is let
// finish and is recorded, until ctx ends or ClusterConfig.HandoverTimeout
// passes, after which the session is stopped as on one machine) its
// history is closed, and its next message activates it on another node.
func (rt *Runtime) Shutdown(ctx context.Context) error {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil
	}
	rt.closed = true
	rt.mu.Unlock()
	rt.timers.StopClaiming() // it opens sessions: stopped before they are listed
	var errs []error
	if rt.cluster != nil {
		if err := rt.cluster.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range rt.local() {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := rt.stopTelemetry(ctx); err != nil {
		errs = append(errs, err)
	}
	if rt.cluster == nil { // a cluster's member shut its system down as it left, these actors with it
		for _, pid := range rt.pids {
			if err := waitFuture(ctx, rt.system.Root.StopFuture(pid)); err != nil {
				errs = append(errs, fmt.Errorf("musepi: stop %s: %w", pid.Id, err))
			}
		}
		rt.system.Shutdown()
	}
	rt.timers.Close()
	rt.pool.Close()
	rt.deps.Goroutines.Close()
	if err := rt.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("musepi: close history: %w", err))
	}
	return errors.Join(errs...)
}

// RetryBudget reports the state of a provider's retry budget (tokens,
// held retries, how many were delayed and released); it fails when the
// provider has no budget (retry.budget.enabled is off) or ctx ends.
func (rt *Runtime) RetryBudget(ctx context.Context, providerName string) (retry.BudgetStats, error) {
	pid := rt.deps.Budgets[providerName]
	if pid == nil {
		return retry.BudgetStats{}, fmt.Errorf("musepi: provider %q has no retry budget (retry.budget.enabled is off, or no such provider)", providerName)
	}
	res, err := reply.Wait(ctx, track.RequestFuture(rt.system.Root, rt.cfg.clock, pid, &protocol.RetryBudgetStatsRequest{}, -1))
	if err != nil {
		return retry.BudgetStats{}, fmt.Errorf("musepi: retry budget of %q: %w", providerName, err)
	}
	st, ok := res.(*protocol.RetryBudgetStats)
	if !ok {
		return retry.BudgetStats{}, fmt.Errorf("musepi: retry budget of %q: unexpected reply %T", providerName, res)
	}
	return retry.BudgetStats{Tokens: st.GetTokens(), Held: int(st.GetHeld()), Delayed: st.GetDelayed(), Released: st.GetReleased()}, nil
}

// ConcurrencyLimit is the overload limiter's concurrency limit of model
// ("provider/model", as WithModel takes it) as its provider's credentials
// actor last published it: how many calls to it may be in flight now (on
// a runtime of cluster.Join, this node's). False when the limiter is off
// (WithOverloadLimiter), the provider unknown, or no turn asked for the
// model yet.
func (rt *Runtime) ConcurrencyLimit(model string) (int, bool) {
	name, m, ok := retry.SplitModel(model)
	if !ok || rt.cfg.overload == nil {
		return 0, false
	}
	return rt.credViews[name].ConcurrencyLimit(overload.Key{Provider: name, Model: m})
}

// waitFuture waits for f until ctx ends.
func waitFuture(ctx context.Context, f *actor.Future) error {
	_, err := reply.Wait(ctx, f)
	return err
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102") + "-" + hex.EncodeToString(b[:])
}
