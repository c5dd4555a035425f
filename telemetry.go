package musepi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/telemetry"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// WithMeterProvider records the runtime's metrics with mp: retry attempts,
// backoffs, chains, usage limits, credential switches, fallbacks, retry
// budgets, sessions by state, provider calls, pacing, the overload
// limiter's limits, calls in flight and capacity waits (with
// WithOverloadLimiter), and OpenTelemetry's GenAI client metrics
// gen_ai.client.operation.duration and gen_ai.client.token.usage
// (docs/observability.md lists them).
// Default: no metrics, and nothing is measured.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *runtimeConfig) {
		if mp == nil {
			c.optionErrs = append(c.optionErrs, errors.New("WithMeterProvider: nil meter provider"))
			return
		}
		c.meterProvider = mp
	}
}

// WithTracerProvider records one trace per prompt with tp: a span for the
// prompt and a child client span per attempt carrying its classification,
// the decision that followed, the GenAI conventions' attributes
// (gen_ai.provider.name, ...) and, with WithOverloadLimiter, the
// concurrency limit its call went out under. Default: no traces.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *runtimeConfig) {
		if tp == nil {
			c.optionErrs = append(c.optionErrs, errors.New("WithTracerProvider: nil tracer provider"))
			return
		}
		c.tracerProvider = tp
	}
}

// startTelemetry starts recording metrics and traces, if a meter or tracer
// provider was given: the providers are wrapped to measure their calls and
// a runtime-wide subscriber observes every session's events. Without
// either, nothing is wrapped and nothing subscribes.
func (rt *Runtime) startTelemetry() error {
	if rt.cfg.meterProvider == nil && rt.cfg.tracerProvider == nil {
		return nil
	}
	budgets := make([]string, 0, len(rt.deps.Budgets))
	for name := range rt.deps.Budgets {
		budgets = append(budgets, name)
	}
	slices.Sort(budgets)
	cfg := telemetry.Config{
		Meter:  rt.cfg.meterProvider,
		Tracer: rt.cfg.tracerProvider,
		Clock:  rt.cfg.clock,
		Log:    rt.cfg.log,
		Sessions: func() telemetry.Snapshot {
			st := rt.Stats()
			return telemetry.Snapshot{ByState: st.ByPhase, Retrying: st.Retrying}
		},
		Budgets: budgets,
		Pacing:  rt.pacingStates,
		Budget: func(ctx context.Context, name string) (retry.BudgetStats, error) {
			return rt.RetryBudget(ctx, name)
		},
	}
	if rt.cfg.overload != nil {
		cfg.Overload, cfg.Limit = rt.modelLoads, rt.modelLimit
	}
	tel, err := telemetry.New(cfg)
	if err != nil {
		return err
	}
	rt.observeCapacityWaits(tel)
	wrapped := make(map[string]provider.Provider, len(rt.deps.Providers))
	for name, p := range rt.deps.Providers {
		wrapped[name] = tel.WrapProvider(name, p)
	}
	rt.deps.Providers = wrapped
	rt.telemetry = tel
	rt.unobserve = rt.allEvents.Subscribe(tel.Observe)
	return nil
}

// flushGrace bounds how long Shutdown waits for the runtime-wide
// subscribers to take the stopped sessions' last events.
const flushGrace = 2 * time.Second

// stopTelemetry lets the telemetry see the stopped sessions' last events
// (until ctx ends, at most flushGrace), then stops it.
func (rt *Runtime) stopTelemetry(ctx context.Context) error {
	if rt.telemetry == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, flushGrace)
	defer cancel()
	rt.deliveries.wait(ctx)
	rt.observeCapacityWaits(nil)
	err := rt.telemetry.Close()
	rt.unobserve()
	if err != nil {
		return fmt.Errorf("musepi: %w", err)
	}
	return nil
}

// eventsClock is the clock of the runtime-wide fan-out: with telemetry
// on, one that counts its deliveries in flight, so that Shutdown can wait
// for them.
func (rt *Runtime) eventsClock() clock.Clock {
	if rt.cfg.meterProvider == nil && rt.cfg.tracerProvider == nil {
		return rt.cfg.clock
	}
	rt.deliveries = &deliveries{Clock: rt.cfg.clock}
	return rt.deliveries
}

// deliveries is a clock that counts the units of work begun and not ended:
// a fan-out begins one when a subscriber's queue fills and ends it when the
// queue is empty again, so none in flight means every event published has
// been delivered.
type deliveries struct {
	clock.Clock
	inFlight atomic.Int64
}

// Begin counts a delivery, and tells the runtime's clock.
func (d *deliveries) Begin() {
	d.inFlight.Add(1)
	d.Clock.Begin()
}

// End counts a delivery done, and tells the runtime's clock.
func (d *deliveries) End() {
	d.inFlight.Add(-1)
	d.Clock.End()
}

// wait returns once no delivery is in flight, or ctx ends.
func (d *deliveries) wait(ctx context.Context) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for d.inFlight.Load() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pacingStates are the providers' pacing as their credentials actors
// last published it, for the metrics.
func (rt *Runtime) pacingStates() []telemetry.PacingState {
	if !rt.cfg.pacing {
		return nil
	}
	var out []telemetry.PacingState
	for _, name := range rt.providerNames() {
		if v := rt.credViews[name]; v != nil {
			out = append(out, telemetry.PacingState{Provider: name, Levels: v.Levels(), Waiting: v.Waiting()})
		}
	}
	return out
}

// modelLoads are the overload limiter's figures of each model, as the
// providers' credentials actors last published them, for the metrics.
func (rt *Runtime) modelLoads() []telemetry.ModelLoad {
	var out []telemetry.ModelLoad
	for _, name := range rt.providerNames() {
		loads := rt.credViews[name].Loads()
		for _, key := range slices.SortedFunc(maps.Keys(loads), func(a, b overload.Key) int { return strings.Compare(a.Model, b.Model) }) {
			l := loads[key]
			out = append(out, telemetry.ModelLoad{Provider: key.Provider, Model: key.Model, Limit: l.Limit, InFlight: l.InFlight})
		}
	}
	return out
}

// modelLimit is the overload limiter's limit of provider's model now.
func (rt *Runtime) modelLimit(provider, model string) (int, bool) {
	return rt.credViews[provider].ConcurrencyLimit(overload.Key{Provider: provider, Model: model})
}

// observeCapacityWaits has tel record each capacity wait as it ends (nil:
// nobody), with the overload limiter on.
func (rt *Runtime) observeCapacityWaits(tel *telemetry.Telemetry) {
	if rt.cfg.overload == nil {
		return
	}
	var f actors.WaitObserver
	if tel != nil {
		f = func(key overload.Key, priority pacing.Priority, waited time.Duration) {
			tel.CapacityWaited(key.Provider, priority, waited)
		}
	}
	for _, v := range rt.credViews {
		v.ObserveWaits(f)
	}
}
