package telemetry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/pacing"
)

// ModelLoad is a model's figures in the overload limiter: its concurrency
// limit and the calls in flight to it.
type ModelLoad struct {
	Provider, Model string
	Limit, InFlight int
}

// observeOverload registers the overload limiter's instruments observed
// at collection: each model's limit and calls in flight.
func (t *Telemetry) observeOverload(meter metric.Meter) (metric.Registration, error) {
	limit, err1 := meter.Int64ObservableGauge(ConcurrencyLimit.Name, metric.WithUnit(ConcurrencyLimit.Unit),
		metric.WithDescription(ConcurrencyLimit.Description))
	inFlight, err2 := meter.Int64ObservableGauge(ConcurrencyInFlight.Name, metric.WithUnit(ConcurrencyInFlight.Unit),
		metric.WithDescription(ConcurrencyInFlight.Description))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("telemetry: create instruments: %w", err)
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if t.cfg.Overload == nil {
			return nil
		}
		for _, l := range t.cfg.Overload() {
			attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("provider", l.Provider), attribute.String("model", l.Model)))
			o.ObserveInt64(limit, int64(l.Limit), attrs)
			o.ObserveInt64(inFlight, int64(l.InFlight), attrs)
		}
		return nil
	}, limit, inFlight)
	if err != nil {
		return nil, fmt.Errorf("telemetry: register callback: %w", err)
	}
	return reg, nil
}

// CapacityWaited records a turn of provider, of priority, that waited
// for a place within its model's concurrency limit until it got one or
// gave up.
func (t *Telemetry) CapacityWaited(provider string, priority pacing.Priority, waited time.Duration) {
	t.in.capacityWait.Record(context.Background(), max(waited, 0).Seconds(),
		labels("provider", orUnknown(provider), "priority", priority.String()))
}

// callSent notes the limit that session's call to provider's model went
// out under (0: none known), for the attempt span of its turn: calls and
// their turns' message_end events come in the same order, a session's
// turns one at a time.
func (t *Telemetry) callSent(session, provider, model string) {
	n, _ := t.cfg.Limit(provider, model)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sentUnder[session] = append(t.sentUnder[session], n)
}

// turnEnded records a turn's end (message_end) at at: the end of its
// pacing wait, if it had one and no delta ended it, and its call's limit
// on the running attempt's span, the last turn's when the attempt had
// several.
func (t *Telemetry) turnEnded(ctx context.Context, s *sessionTrack, session string, at time.Time) {
	t.pacingEnded(ctx, s, at)
	if t.cfg.Limit == nil {
		return
	}
	queue := t.sentUnder[session]
	if len(queue) == 0 {
		return // a turn that made no call (refused before it)
	}
	n := queue[0]
	if len(queue) == 1 {
		delete(t.sentUnder, session)
	} else {
		t.sentUnder[session] = queue[1:]
	}
	if s != nil && s.trace.run != nil && n > 0 {
		s.trace.run.span.SetAttributes(attribute.Int(AttrConcurrencyLimit, n))
	}
}

// eventsLost records an events_lost: the events missed are counted, and
// the limits of the calls whose message_end may be among them are
// dropped, so that no later turn takes another's (the turns of calls in
// flight then carry none).
func (t *Telemetry) eventsLost(ctx context.Context, lost *messages.EventsLost) {
	t.in.eventsLost.Add(ctx, int64(lost.GetCount()))
	clear(t.sentUnder)
}
