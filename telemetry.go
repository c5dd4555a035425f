package musepi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/musepi/musepi/internal/telemetry"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// WithMeterProvider records the runtime's metrics with mp: retry attempts,
// backoffs, chains, usage limits, credential switches, fallbacks, retry
// budgets, sessions by state, provider calls (README, "Operating MusePi",
// lists them). Default: no metrics, and nothing is measured.
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
// prompt and a child span per attempt carrying its classification and the
// decision that followed. Default: no traces.
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
	sort.Strings(budgets)
	tel, err := telemetry.New(telemetry.Config{
		Meter:  rt.cfg.meterProvider,
		Tracer: rt.cfg.tracerProvider,
		Clock:  rt.cfg.clock,
		Log:    rt.cfg.log,
		Sessions: func() telemetry.Snapshot {
			st := rt.Stats()
			return telemetry.Snapshot{ByState: st.ByPhase, Retrying: st.Retrying}
		},
		Budgets: slices.Clip(budgets),
		Budget: func(ctx context.Context, name string) (retry.BudgetStats, error) {
			return rt.RetryBudget(ctx, name)
		},
	})
	if err != nil {
		return err
	}
	wrapped := make(map[string]provider.Provider, len(rt.deps.Providers))
	for name, p := range rt.deps.Providers {
		wrapped[name] = tel.WrapProvider(name, p)
	}
	rt.deps.Providers = wrapped
	rt.telemetry = tel
	rt.unobserve = rt.allEvents.Subscribe(tel.Observe)
	return nil
}

// stopTelemetry lets the telemetry see the stopped sessions' last events,
// then stops it.
func (rt *Runtime) stopTelemetry(ctx context.Context) error {
	if rt.telemetry == nil {
		return nil
	}
	err := rt.telemetry.Close(ctx)
	rt.unobserve()
	if err != nil {
		return fmt.Errorf("musepi: %w", err)
	}
	return nil
}
