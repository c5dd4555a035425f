package telemetry

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/pacing"
)

// ScopeName is the instrumentation scope of MusePi's meter and tracer.
const ScopeName = "github.com/musepi/musepi"

// Config is what a Telemetry reports to and reads from.
type Config struct {
	// Meter receives the metrics (nil: none are recorded, and providers
	// are not wrapped).
	Meter metric.MeterProvider
	// Tracer receives one trace per prompt (nil: no spans).
	Tracer trace.TracerProvider
	// Clock times provider calls (the runtime's clock).
	Clock clock.Clock
	// Log takes what cannot be observed (a retry budget that did not answer).
	Log *slog.Logger
	// Sessions reports the runtime's sessions when metrics are collected.
	Sessions func() Snapshot
	// Budgets are the providers with a retry budget, read through Budget
	// when metrics are collected.
	Budgets []string
	Budget  budgetFunc
	// Pacing reports the providers' pacing when metrics are collected
	// (nil: none).
	Pacing func() []PacingState
	// Overload reports the overload limiter's figures of each model when
	// metrics are collected (nil: the limiter is off).
	Overload func() []ModelLoad
	// Limit is the overload limiter's limit of a provider's model now,
	// read as each call goes out, for its attempt span (nil: the limiter
	// is off; false: none known).
	Limit func(provider, model string) (int, bool)
}

// PacingState is what a provider's pacing reports: what its keys have
// left, and the turns waiting by priority (high, normal, low).
type PacingState struct {
	Provider string
	Levels   []pacing.Level
	Waiting  [3]int64
}

// Telemetry records a runtime's metrics and traces. Observe is its event
// subscriber; WrapProvider measures provider calls.
type Telemetry struct {
	cfg    Config
	in     *instruments
	tracer trace.Tracer
	reg    []metric.Registration // none without metrics

	mu        sync.Mutex
	closed    bool
	sessions  map[string]*sessionTrack // sessions with a prompt running
	families  map[string]string        // gen_ai.provider.name by configured provider name (WrapProvider)
	sentUnder map[string][]int         // the limits of each session's calls whose message_end is not yet observed (Config.Limit)
}

// New starts recording to cfg.Meter and cfg.Tracer; at least one must be
// set. Close stops it.
func New(cfg Config) (*Telemetry, error) {
	if cfg.Meter == nil && cfg.Tracer == nil {
		return nil, errors.New("telemetry: neither a meter provider nor a tracer provider")
	}
	t := &Telemetry{cfg: cfg, sessions: map[string]*sessionTrack{}, families: map[string]string{}, sentUnder: map[string][]int{}}
	meterProvider := cfg.Meter
	if meterProvider == nil {
		meterProvider = metricnoop.NewMeterProvider()
	}
	meter := meterProvider.Meter(ScopeName)
	in, err := newInstruments(meter)
	if err != nil {
		return nil, err
	}
	t.in = in
	if cfg.Meter != nil {
		for _, observe := range []func(metric.Meter) (metric.Registration, error){t.observe, t.observePacing, t.observeOverload} {
			reg, err := observe(meter)
			if err != nil {
				return nil, err
			}
			t.reg = append(t.reg, reg)
		}
	}
	tracerProvider := cfg.Tracer
	if tracerProvider == nil {
		tracerProvider = tracenoop.NewTracerProvider()
	}
	t.tracer = tracerProvider.Tracer(ScopeName)
	return t, nil
}

// Close stops observing: the spans of prompts whose last events it has
// not seen are ended, and metrics are no longer collected from the
// runtime. Call it once the sessions have stopped and their events have
// been delivered.
func (t *Telemetry) Close() error {
	t.mu.Lock()
	t.closed = true
	now := time.Now()
	if t.cfg.Clock != nil {
		now = t.cfg.Clock.Now()
	}
	for id, s := range t.sessions {
		s.trace.settled(now, false, "runtime shut down before the prompt's last events were observed")
		delete(t.sessions, id)
	}
	t.mu.Unlock()
	for _, reg := range t.reg {
		if err := reg.Unregister(); err != nil {
			return fmt.Errorf("telemetry: unregister metrics callback: %w", err)
		}
	}
	return nil
}
