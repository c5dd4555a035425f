package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/session"
)

// Snapshot is what the runtime reports of its sessions when metrics are
// collected.
type Snapshot struct {
	ByState  map[string]int // open sessions by state name (session.State)
	Retrying int            // sessions whose retry chain is open
}

// budgetTimeout bounds how long a collection waits for one provider's
// retry budget actor.
const budgetTimeout = time.Second

// states are the names of every session state as observers see them
// (session.State.Phase), so that a state with no session reports 0
// instead of vanishing from the series.
func states() []string {
	var out []string
	for st := session.Idle; st.String() != "unknown"; st++ {
		if !slices.Contains(out, st.Phase()) {
			out = append(out, st.Phase())
		}
	}
	return out
}

// observe registers the instruments observed at collection: sessions by
// state, open chains and the retry budgets of budgets.
func (t *Telemetry) observe(meter metric.Meter) (metric.Registration, error) {
	sessions, err1 := meter.Int64ObservableGauge(Sessions.Name, metric.WithUnit(Sessions.Unit), metric.WithDescription(Sessions.Description))
	open, err2 := meter.Int64ObservableGauge(RetryChainsOpen.Name, metric.WithUnit(RetryChainsOpen.Unit), metric.WithDescription(RetryChainsOpen.Description))
	tokens, err3 := meter.Float64ObservableGauge(BudgetTokens.Name, metric.WithUnit(BudgetTokens.Unit), metric.WithDescription(BudgetTokens.Description))
	held, err4 := meter.Int64ObservableGauge(BudgetHeld.Name, metric.WithUnit(BudgetHeld.Unit), metric.WithDescription(BudgetHeld.Description))
	delayed, err5 := meter.Int64ObservableCounter(BudgetDelayed.Name, metric.WithUnit(BudgetDelayed.Unit), metric.WithDescription(BudgetDelayed.Description))
	for _, err := range []error{err1, err2, err3, err4, err5} {
		if err != nil {
			return nil, fmt.Errorf("telemetry: create instruments: %w", err)
		}
	}
	names := states()
	byState := make([]metric.ObserveOption, len(names))
	for i, name := range names {
		byState[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("state", name)))
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		snap := t.cfg.Sessions()
		for i, name := range names {
			o.ObserveInt64(sessions, int64(snap.ByState[name]), byState[i])
		}
		o.ObserveInt64(open, int64(snap.Retrying))
		for _, p := range t.cfg.Budgets {
			bctx, cancel := context.WithTimeout(ctx, budgetTimeout)
			st, err := t.cfg.Budget(bctx, p)
			cancel()
			if err != nil {
				t.cfg.Log.Warn("metrics: retry budget not observed", slog.Any("error", err), slog.String("provider", p))
				continue
			}
			attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("provider", p)))
			o.ObserveFloat64(tokens, st.Tokens, attrs)
			o.ObserveInt64(held, int64(st.Held), attrs)
			o.ObserveInt64(delayed, st.Delayed, attrs)
		}
		return nil
	}, sessions, open, tokens, held, delayed)
	if err != nil {
		return nil, fmt.Errorf("telemetry: register callback: %w", err)
	}
	return reg, nil
}

// budgetFunc reads a provider's retry budget.
type budgetFunc = func(ctx context.Context, provider string) (retry.BudgetStats, error)

// priorities are the pacing priorities' names, in pacing.Priority order.
var priorities = [3]string{"high", "normal", "low"}

// observePacing registers the pacing instruments observed at collection:
// what the keys have left of their rate limits, and the turns waiting.
func (t *Telemetry) observePacing(meter metric.Meter) (metric.Registration, error) {
	remaining, err1 := meter.Float64ObservableGauge(RateLimitRemaining.Name, metric.WithUnit(RateLimitRemaining.Unit),
		metric.WithDescription(RateLimitRemaining.Description))
	waiting, err2 := meter.Int64ObservableGauge(PacingWaiting.Name, metric.WithUnit(PacingWaiting.Unit),
		metric.WithDescription(PacingWaiting.Description))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("telemetry: create instruments: %w", err)
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if t.cfg.Pacing == nil {
			return nil
		}
		for _, p := range t.cfg.Pacing() {
			for _, l := range p.Levels {
				o.ObserveFloat64(remaining, l.Remaining, metric.WithAttributes(attribute.String("provider", p.Provider),
					attribute.String("credential", l.Credential), attribute.String("limit", l.Kind.String())))
			}
			for i, n := range p.Waiting {
				o.ObserveInt64(waiting, n, metric.WithAttributes(attribute.String("provider", p.Provider),
					attribute.String("priority", priorities[i])))
			}
		}
		return nil
	}, remaining, waiting)
	if err != nil {
		return nil, fmt.Errorf("telemetry: register callback: %w", err)
	}
	return reg, nil
}
