package musepi

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// Credential is one API key of a provider (WithProvider): its name, its
// key (APIKey, or APIKeyEnv naming the environment variable NewRuntime
// reads it from), the usage-limit resets it may spend (BankedResets) and
// its RateLimits. NewRuntime refuses a credential without a key. The
// runtime's actors spend it as it is (actors.Credential documents the
// fields).
type Credential = actors.Credential

// RateLimits are a credential's per-minute rate limits (0: none):
// requests, tokens, input tokens and output tokens.
type RateLimits = pacing.Limits

// Tool is a Go function the model may call (WithTools): its name,
// description and argument schema, sent to the model, and its Run. The
// runtime's actors run it as it is (actors.Tool documents the fields).
type Tool = actors.Tool

// CompactionHook shrinks a session's context (what its next turn sends to
// the model) that overflowed the model's window (WithCompactionHook). It
// gets the session's id, its context and the failed turn (nil for a manual
// Session.Compact) and returns the new context, after which the session
// continues the prompt, or an error that ends the prompt. Entries it keeps
// should keep their Seq; new ones (a summary) have Seq 0.
type CompactionHook func(ctx context.Context, sessionID string, context []Entry, failed *AssistantMessage) ([]Entry, error)

// wire is the hook on the actors' wire types.
func (h CompactionHook) wire() actors.CompactionHook {
	if h == nil {
		return nil
	}
	return func(ctx context.Context, sessionID string, entries []*messages.Entry, failed *messages.AssistantMessage) ([]*messages.Entry, error) {
		out, err := h(ctx, sessionID, fromWireEntries(entries), fromWireAssistant(failed))
		if err != nil {
			return nil, err
		}
		return toWireEntries(out), nil
	}
}

type runtimeConfig struct {
	optionErrs  []error // options that cannot be applied, reported by NewRuntime
	clock       clock.Clock
	log         *slog.Logger // what the internals log with (WithLogger's)
	providers   map[string]provider.Provider
	creds       map[string][]Credential
	autoRedeem  bool
	pacing      bool                  // WithPacing (default on)
	overload    *overload.Settings    // WithOverloadLimiter (nil: off)
	stickyWait  time.Duration         // WithPacingStickyWait (0: the default)
	rateLimits  map[string]RateLimits // WithRateLimits, by provider
	settings    retry.Settings
	store       history.Store
	historyDir  string
	historySync history.Sync
	tools       []Tool
	compaction  CompactionHook
	seed        uint64
	seeded      bool
	newSource   func() retry.Source
	streamIdle  time.Duration
	passivate   time.Duration
	timerPoll   time.Duration
	limits      Limits
	maxResponse int
	queueLen    int

	meterProvider  metric.MeterProvider // WithMeterProvider
	tracerProvider trace.TracerProvider // WithTracerProvider
}

// Option configures a Runtime. NewRuntime refuses options that cannot
// apply (a nil value, a negative setting, a name given twice), with an
// error naming the option.
type Option func(*runtimeConfig)

// refuse records that option cannot apply, for NewRuntime to report.
func (c *runtimeConfig) refuse(option, format string, args ...any) {
	c.optionErrs = append(c.optionErrs, fmt.Errorf("%s: %s", option, fmt.Sprintf(format, args...)))
}

// WithClock runs the runtime on clk (default: the wall clock). A
// clock.Virtual runs the whole runtime in virtual time.
func WithClock(clk clock.Clock) Option {
	return func(c *runtimeConfig) {
		if clk == nil {
			c.refuse("WithClock", "nil clock")
			return
		}
		c.clock = clk
	}
}

// WithLogger logs through log (default: warnings and errors to stderr, by
// zerolog's slog handler). The runtime logs what an operator acts on: history writes that
// failed, panics recovered, subscribers that fell behind; at debug level
// also its decisions. protoactor-go's own log/slog output goes to the same
// logger at warning and above only (its info lines are dead letters of
// aborted streams and the like).
func WithLogger(log *slog.Logger) Option {
	return func(c *runtimeConfig) {
		if log == nil {
			c.refuse("WithLogger", "nil logger (slog.New(slog.DiscardHandler) logs nothing)")
			return
		}
		c.log = log
	}
}

// WithProvider registers a provider under name, with its credentials (API
// keys), selected per session and switched on usage limits. NewRuntime
// refuses an empty name, a nil provider and a name given twice.
func WithProvider(name string, p provider.Provider, creds ...Credential) Option {
	return func(c *runtimeConfig) {
		switch _, dup := c.providers[name]; {
		case name == "":
			c.refuse("WithProvider", "empty provider name")
		case strings.Contains(name, "/"):
			c.refuse(fmt.Sprintf("WithProvider(%q)", name), "a provider name cannot hold '/' (models are named \"provider/model\")")
		case p == nil:
			c.refuse(fmt.Sprintf("WithProvider(%q)", name), "nil provider")
		case dup:
			c.refuse(fmt.Sprintf("WithProvider(%q)", name), "provider given twice")
		}
		c.providers[name] = p
		c.creds[name] = append([]Credential(nil), creds...)
	}
}

// WithPacing turns pacing on or off (default on): each turn on a
// provider with credentials first reserves a request, its estimated input
// tokens and its output bound from its key's rate limits, which configured
// limits (RateLimits) seed and the provider's rate-limit headers correct;
// a turn that fits no key waits (a rate_limit_wait event) until a key's
// rate-limit budget refills, in priority order (WithPriority). Without
// limits known, turns go at once.
func WithPacing(on bool) Option { return func(c *runtimeConfig) { c.pacing = on } }

// WithOverloadLimiter turns on an adaptive concurrency limit per model
// (package overload), tuned by s (zero fields: the defaults): each turn
// asks for a place within its model's
// limit as it asks for its key, and a turn that finds the limit full
// waits (a capacity_wait event) until an answer frees a place, in
// priority order (WithPriority). The limit falls when the provider
// answers that it is overloaded (529, 503, overload wording) or a call
// times out, and rises while it answers. s.MaxQueueWait bounds how long
// a retry waits for a cooling model, and s.HighPriorityFallback names the
// roles whose high-priority turns take a fallback with room at once
// (docs/retry-policy.md). Default off: without it each session backs off
// and retries on its own, the reference policy.
func WithOverloadLimiter(s overload.Settings) Option {
	return func(c *runtimeConfig) { c.overload = &s }
}

// DefaultPacingStickyWait is WithPacingStickyWait's default.
const DefaultPacingStickyWait = pacing.DefaultStickyWait

// WithPacingStickyWait sets how much sooner another key must take a paced
// turn before the turn moves there from the key its session last used
// (default DefaultPacingStickyWait, 2 s; a negative d moves to any key
// that takes it sooner); it moves only to a key no turn of its priority
// or a more urgent one waits for. Providers
// cache prompt prefixes per organization and model: when the keys belong
// to different organizations, every move throws the session's prompt
// cache away. A move is told as a credential_switch with reason pacing.
func WithPacingStickyWait(d time.Duration) Option {
	return func(c *runtimeConfig) { c.stickyWait = d }
}

// WithRateLimits sets the per-minute limits of provider's credentials that
// set none of their own (Credential.RateLimits).
func WithRateLimits(provider string, l RateLimits) Option {
	return func(c *runtimeConfig) {
		if l.RPM < 0 || l.TPM < 0 || l.InputTPM < 0 || l.OutputTPM < 0 {
			c.refuse(fmt.Sprintf("WithRateLimits(%q)", provider), "negative limit")
			return
		}
		if c.rateLimits == nil {
			c.rateLimits = map[string]RateLimits{}
		}
		c.rateLimits[provider] = l
	}
}

// WithAutoRedeem lets a usage limit spend a credential's banked reset
// when no sibling credential is free (default off).
func WithAutoRedeem(on bool) Option { return func(c *runtimeConfig) { c.autoRedeem = on } }

// WithRetrySettings sets the `retry` settings group of every session
// (default retry.DefaultSettings()). Start from retry.DefaultSettings() and
// change what differs: the zero Settings is refused, as are negative
// counts and delays.
func WithRetrySettings(s retry.Settings) Option {
	return func(c *runtimeConfig) {
		if err := s.Validate(); err != nil {
			c.refuse("WithRetrySettings", "%v", err)
			return
		}
		c.settings = s
	}
}

// WithHistoryDir keeps each session's history in dir, one JSON-lines file
// per session, so it survives a restart. Without it (and without
// WithHistoryStore) history lives in memory.
func WithHistoryDir(dir string) Option {
	return func(c *runtimeConfig) {
		if dir == "" {
			c.refuse("WithHistoryDir", "empty directory (leave the option out to keep history in memory)")
			return
		}
		c.historyDir = dir
	}
}

// WithHistorySync sets when WithHistoryDir's files are synced to disk:
// history.SyncTurn (the default: after each turn's assistant message and
// tool results, and on a model change by the user), history.SyncEntry
// (after every entry) or history.SyncNone (left to the operating system).
// A killed process loses nothing written under any of them; the policy is
// about power cuts and kernel crashes.
func WithHistorySync(policy history.Sync) Option {
	return func(c *runtimeConfig) {
		if policy < history.SyncTurn || policy > history.SyncNone {
			c.refuse("WithHistorySync", "unknown policy %d (want history.SyncTurn, SyncEntry or SyncNone)", policy)
			return
		}
		c.historySync = policy
	}
}

// WithHistoryStore keeps history in store; the runtime closes it on Shutdown.
func WithHistoryStore(store history.Store) Option {
	return func(c *runtimeConfig) {
		if store == nil {
			c.refuse("WithHistoryStore", "nil store")
			return
		}
		c.store = store
	}
}

// WithTools registers Go tools the model may call; NewRuntime refuses a
// tool without a name or a Run function, and a name given twice.
func WithTools(tools ...Tool) Option {
	return func(c *runtimeConfig) {
		for _, t := range tools {
			switch {
			case t.Name == "":
				c.refuse("WithTools", "a tool without a name")
				continue
			case t.Run == nil:
				c.refuse(fmt.Sprintf("WithTools(%q)", t.Name), "nil Run")
				continue
			case slices.ContainsFunc(c.tools, func(o Tool) bool { return o.Name == t.Name }):
				c.refuse(fmt.Sprintf("WithTools(%q)", t.Name), "tool given twice")
				continue
			}
			c.tools = append(c.tools, t)
		}
	}
}

// WithCompactionHook runs hook on context overflow (default: emit
// compaction_required and end the prompt with ErrContextOverflow).
func WithCompactionHook(hook CompactionHook) Option {
	return func(c *runtimeConfig) { c.compaction = hook }
}

// WithSeed makes the retry jitter reproducible (default: random).
func WithSeed(seed uint64) Option {
	return func(c *runtimeConfig) { c.seed, c.seeded = seed, true }
}

// WithJitterSource gives each session's retry chain the source newSource
// returns, for simulations and tests that need exact delays (a source
// returning 1 gives the nominal backoff). It overrides WithSeed.
func WithJitterSource(newSource func() retry.Source) Option {
	return func(c *runtimeConfig) {
		if newSource == nil {
			c.refuse("WithJitterSource", "nil source function")
			return
		}
		c.newSource = newSource
	}
}

// WithStreamIdleTimeout ends a stream that sends nothing for d as a
// transient "stream stalled" error, which the policy retries unless output
// had already streamed (default 120 s; 0 turns the watchdog off).
func WithStreamIdleTimeout(d time.Duration) Option {
	return func(c *runtimeConfig) {
		if d < 0 {
			c.refuse("WithStreamIdleTimeout", "negative timeout %v (0 turns the watchdog off)", d)
			return
		}
		c.streamIdle = d
	}
}

// DefaultMaxResponseBytes is the response size bound of a runtime without
// WithMaxResponseBytes (4 MiB).
const DefaultMaxResponseBytes = actors.DefaultMaxResponseBytes

// WithMaxResponseBytes bounds the output one turn may stream, in bytes of
// text, thinking and tool-call arguments (default 4 MiB; 0 turns the bound
// off). A turn that streams more is ended with the error "response too
// large: ...", which is not retried, and the prompt fails with it.
func WithMaxResponseBytes(n int) Option {
	return func(c *runtimeConfig) {
		if n < 0 {
			c.refuse("WithMaxResponseBytes", "negative bound %d (0 turns the bound off)", n)
			return
		}
		c.maxResponse = n
	}
}

// Limits bound what a runtime holds; a zero field means no limit.
type Limits struct {
	// Sessions is the most sessions running at once (default 100,000).
	Sessions int
	// PromptsInFlight is the most prompts running at once across all
	// sessions (default 100,000).
	PromptsInFlight int
	// PromptBytes is the largest prompt text accepted (default 1 MiB).
	PromptBytes int
}

// DefaultLimits are the limits of a runtime without WithLimits.
var DefaultLimits = Limits{Sessions: 100_000, PromptsInFlight: 100_000, PromptBytes: 1 << 20}

// WithLimits bounds sessions, prompts in flight and prompt size; exceeding
// one returns a *LimitError (errors.Is(err, ErrLimitExceeded)).
// A negative field is refused.
func WithLimits(l Limits) Option {
	return func(c *runtimeConfig) {
		for _, f := range []struct {
			name string
			n    int
		}{{"Sessions", l.Sessions}, {"PromptsInFlight", l.PromptsInFlight}, {"PromptBytes", l.PromptBytes}} {
			if f.n < 0 {
				c.refuse("WithLimits", "%s is %d: want 0 (no limit) or more", f.name, f.n)
				return
			}
		}
		c.limits = l
	}
}

// WithEventQueueLen bounds each subscriber's queue (default 4096 events).
// A subscriber that falls behind misses message_update deltas first, then
// other non-terminal events (they have a reserve of a quarter more places),
// never agent_end, auto_retry_end or agent_settled, and is told with
// events_lost {count}.
// Zero keeps the default; a negative length is refused.
func WithEventQueueLen(n int) Option {
	return func(c *runtimeConfig) {
		if n < 0 {
			c.refuse("WithEventQueueLen", "negative length %d", n)
			return
		}
		c.queueLen = n
	}
}

type sessionConfig struct {
	id       string
	model    string
	role     string
	settings *retry.Settings
	steering func() []string
	priority Priority
	open     func(ctx context.Context, id string) (history.Log, []*messages.Entry, error)
}

// WithTakeover opens the session's history with open instead of the
// runtime's store's Open: for a cluster that knows the node holding the
// session is dead before its lease runs out, open is the store's forced
// takeover, e.g. for cluster/pgstore (which fences the dead node's writes):
//
//	musepi.WithTakeover(func(ctx context.Context, id string) (history.Log, []*messages.Entry, error) {
//		l, entries, err := pg.Takeover(ctx, id)
//		if err != nil {
//			return nil, nil, err
//		}
//		return l, entries, nil
//	})
//
// The session then resumes as from Open: its retry chain from its record.
func WithTakeover(open func(ctx context.Context, id string) (history.Log, []*messages.Entry, error)) SessionOption {
	return func(c *sessionConfig) { c.open = open }
}

// SessionOption configures a Session.
type SessionOption func(*sessionConfig)

// WithModel sets the session's primary model, "provider/model" (required).
func WithModel(selector string) SessionOption { return func(c *sessionConfig) { c.model = selector } }

// WithRole sets the model role whose fallback chain applies (default "default").
func WithRole(role string) SessionOption { return func(c *sessionConfig) { c.role = role } }

// WithSessionID names the session (default: random). Reusing the id of a
// session whose history is stored resumes that history.
func WithSessionID(id string) SessionOption { return func(c *sessionConfig) { c.id = id } }

// Priority orders a session's turns among those waiting for a rate-limit
// budget (pacing): all waiting turns of a higher priority go before any of
// a lower one, and within a priority the first to wait goes first, so a
// low-priority background agent never holds back an interactive one.
type Priority = pacing.Priority

// The priorities (the zero value, and the default, is Normal).
const (
	Normal = pacing.Normal
	High   = pacing.High
	Low    = pacing.Low
)

// WithPriority sets the session's priority for pacing (default Normal).
func WithPriority(p Priority) SessionOption {
	return func(c *sessionConfig) { c.priority = p }
}

// WithSteering gives the session a source of steering messages: after a
// turn's tool calls have run, before the next turn, the session calls next
// and adds each message it returns to the conversation as a user message
// (event steering_delivered). next is called from the session's goroutine:
// it must return at once, and must not call the session.
func WithSteering(next func() []string) SessionOption {
	return func(c *sessionConfig) { c.steering = next }
}

// WithSessionRetrySettings overrides the runtime's retry settings for this
// session. Fallback chains are runtime-wide (one fallback actor per role,
// whose cooldowns every session shares): settings with other chains than
// the runtime's are refused by NewSession, as are invalid ones.
func WithSessionRetrySettings(s retry.Settings) SessionOption {
	return func(c *sessionConfig) { c.settings = &s }
}

// DefaultPassivateAfter is how long a backoff must be for its session to
// leave its actors while it waits (WithPassivateAfter).
const DefaultPassivateAfter = 30 * time.Second

// WithPassivateAfter lets a session waiting out a backoff of at least d
// leave its actors while it waits, as a virtual actor is passivated: its
// state stays in memory, its scheduler wakes it, and any message starts
// it again (default DefaultPassivateAfter; 0 turns it off). A session
// whose provider has a retry budget does not passivate.
func WithPassivateAfter(d time.Duration) Option {
	return func(c *runtimeConfig) {
		if d < 0 {
			c.optionErrs = append(c.optionErrs, fmt.Errorf("WithPassivateAfter: negative %v", d))
		}
		c.passivate = d
	}
}

// DefaultTimerPoll is how often a runtime whose history store has durable
// timers (TimerStore) claims the due sessions of dead or departed nodes.
const DefaultTimerPoll = time.Second

// WithTimerPoll sets how often a runtime whose store is a TimerStore
// claims due sessions (default DefaultTimerPoll; 0 turns claiming off).
// Other stores ignore it.
func WithTimerPoll(every time.Duration) Option {
	return func(c *runtimeConfig) {
		if every < 0 {
			c.optionErrs = append(c.optionErrs, fmt.Errorf("WithTimerPoll: negative %v", every))
		}
		c.timerPoll = every
	}
}
