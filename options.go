package musepi

import (
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// Credential is one API key of a provider.
type Credential = actors.Credential

// Tool is a Go function the model may call.
type Tool = actors.Tool

// CompactionHook shrinks a runtime context that overflowed the model's window.
type CompactionHook = actors.CompactionHook

type runtimeConfig struct {
	optionErrs  []error // options that cannot be applied, reported by NewRuntime
	clock       clock.Clock
	log         zerolog.Logger
	providers   map[string]provider.Provider
	creds       map[string][]Credential
	autoRedeem  bool
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
	limits      Limits
	maxResponse int
	queueLen    int

	meterProvider  metric.MeterProvider // WithMeterProvider
	tracerProvider trace.TracerProvider // WithTracerProvider
}

// Option configures a Runtime.
type Option func(*runtimeConfig)

// WithClock runs the runtime on clk (default: the wall clock). A
// clock.Virtual runs the whole runtime in virtual time.
func WithClock(clk clock.Clock) Option { return func(c *runtimeConfig) { c.clock = clk } }

// WithLogger logs through log (default: warnings and errors to stderr).
// protoactor-go's own log/slog output goes to the same logger.
func WithLogger(log zerolog.Logger) Option { return func(c *runtimeConfig) { c.log = log } }

// WithProvider registers a provider under name, with its credentials (API
// keys), selected per session and switched on usage limits. NewRuntime
// refuses an empty name, a nil provider and a name given twice.
func WithProvider(name string, p provider.Provider, creds ...Credential) Option {
	return func(c *runtimeConfig) {
		switch _, dup := c.providers[name]; {
		case name == "":
			c.optionErrs = append(c.optionErrs, errors.New("WithProvider: empty provider name"))
		case p == nil:
			c.optionErrs = append(c.optionErrs, fmt.Errorf("WithProvider(%q): nil provider", name))
		case dup:
			c.optionErrs = append(c.optionErrs, fmt.Errorf("WithProvider(%q): provider given twice", name))
		}
		c.providers[name] = p
		c.creds[name] = append([]Credential(nil), creds...)
	}
}

// WithAutoRedeem lets a usage limit spend a credential's banked reset
// when no sibling credential is free (default off).
func WithAutoRedeem(on bool) Option { return func(c *runtimeConfig) { c.autoRedeem = on } }

// WithRetrySettings sets the `retry` settings group of every session
// (default retry.DefaultSettings()).
func WithRetrySettings(s retry.Settings) Option { return func(c *runtimeConfig) { c.settings = s } }

// WithHistoryDir keeps each session's history in dir, one JSON-lines file
// per session, so it survives a restart. Without it (and without
// WithHistoryStore) history lives in memory.
func WithHistoryDir(dir string) Option { return func(c *runtimeConfig) { c.historyDir = dir } }

// WithHistorySync sets when WithHistoryDir's files are synced to disk:
// history.SyncTurn (the default: after each turn's assistant message and
// tool results, and on a model change by the user), history.SyncEntry
// (after every entry) or history.SyncNone (left to the operating system).
// A killed process loses nothing written under any of them; the policy is
// about power cuts and kernel crashes.
func WithHistorySync(policy history.Sync) Option {
	return func(c *runtimeConfig) { c.historySync = policy }
}

// WithHistoryStore keeps history in store; the runtime closes it on Shutdown.
func WithHistoryStore(store history.Store) Option { return func(c *runtimeConfig) { c.store = store } }

// WithTools registers Go tools the model may call.
func WithTools(tools ...Tool) Option {
	return func(c *runtimeConfig) { c.tools = append(c.tools, tools...) }
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
	return func(c *runtimeConfig) { c.newSource = newSource }
}

// WithStreamIdleTimeout ends a stream that sends nothing for d as a
// transient "stream stalled" error, which the policy retries unless output
// had already streamed (default 120 s; 0 turns the watchdog off).
func WithStreamIdleTimeout(d time.Duration) Option {
	return func(c *runtimeConfig) { c.streamIdle = d }
}

// DefaultMaxResponseBytes is the response size bound of a runtime without
// WithMaxResponseBytes (4 MiB).
const DefaultMaxResponseBytes = actors.DefaultMaxResponseBytes

// WithMaxResponseBytes bounds the output one turn may stream, in bytes of
// text, thinking and tool-call arguments (default 4 MiB; 0 turns the bound
// off). A turn that streams more is ended with the error "response too
// large: ...", which is not retried, and the prompt fails with it.
func WithMaxResponseBytes(n int) Option {
	return func(c *runtimeConfig) { c.maxResponse = n }
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
func WithLimits(l Limits) Option { return func(c *runtimeConfig) { c.limits = l } }

// WithEventQueueLen bounds each subscriber's queue (default 4096 events).
// A subscriber that falls behind misses message_update deltas first, then
// other non-terminal events (they have a reserve of a quarter more places),
// never agent_end, auto_retry_end or agent_settled, and is told with
// events_lost {count}.
func WithEventQueueLen(n int) Option { return func(c *runtimeConfig) { c.queueLen = n } }

type sessionConfig struct {
	id       string
	model    string
	role     string
	settings *retry.Settings
	steering func() []string
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
