package telemetry

import (
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
)

// Kind is the kind of an instrument.
type Kind uint8

// The instrument kinds used.
const (
	Counter       Kind = iota // monotonic, added to as things happen
	UpDownCounter             // goes up and down as things happen
	Histogram                 // a distribution of values
	Gauge                     // observed when metrics are collected
	ObservedCount             // a monotonic count observed when metrics are collected
)

// Metric describes one instrument: its OpenTelemetry name, unit, labels
// (attribute keys; never a session id, so their cardinality is bounded by
// the configuration) and meaning.
type Metric struct {
	Name        string
	Kind        Kind
	Unit        string
	Labels      []string
	Description string
}

// PrometheusName is the name the Prometheus exporter gives the metric
// (dots to underscores, "_seconds" for a unit of seconds, "_total" for
// counters).
func (m *Metric) PrometheusName() string {
	name := strings.ReplaceAll(m.Name, ".", "_")
	if m.Unit == "s" {
		name += "_seconds"
	}
	if m.Kind == Counter || m.Kind == ObservedCount {
		name += "_total"
	}
	return name
}

// The metrics, in the order docs/observability.md documents them.
var (
	RetryAttempts = Metric{"musepi.retry.attempts", Counter, "{attempt}", []string{"provider", "model", "class"},
		"Retry attempts started (auto_retry_start), by the provider and model of the turn that failed and its error class."}
	RetryBackoff = Metric{"musepi.retry.backoff", Histogram, "s", []string{"provider", "class"},
		"Delay before each retry attempt (auto_retry_start delayMs), in seconds; 0 after a credential switch or a model fallback."}
	RetryWaiting = Metric{"musepi.retry.waiting", UpDownCounter, "{session}", []string{"provider", "class"},
		"Sessions waiting now between auto_retry_start and the attempt it announced (backoff), by provider and error class."}
	RetryChains = Metric{"musepi.retry.chains", Counter, "{chain}", []string{"outcome"},
		"Retry chains ended (auto_retry_end), by outcome: success, failure (retries exhausted, a wait over retry.maxDelayMs, a non-retryable error), cancelled (abort_retry, Abort), shutdown."}
	RetryChainsOpen = Metric{"musepi.retry.chains.open", Gauge, "{session}", nil,
		"Sessions whose retry chain is open now."}
	UsageLimits = Metric{"musepi.usage_limits", Counter, "{turn}", []string{"provider", "model"},
		"Turns that ended in a usage or quota limit (classified usage_limit), whether retried or not."}
	CredentialSwitches = Metric{"musepi.credential.switches", Counter, "{switch}", []string{"provider", "reason"},
		"Sessions moved to another credential of their provider (credential_switch), by reason: usage_limit, usage_limit_redeemed or pacing."}
	FallbacksApplied = Metric{"musepi.fallback.applied", Counter, "{fallback}", []string{"role", "from", "to"},
		"Model fallbacks applied by a retry (retry_fallback_applied)."}
	FallbacksSucceeded = Metric{"musepi.fallback.succeeded", Counter, "{fallback}", []string{"role", "model"},
		"First successes on a fallback model (retry_fallback_succeeded)."}
	FallbacksReverted = Metric{"musepi.fallback.reverted", Counter, "{revert}", []string{"role", "from", "to"},
		"Returns from a fallback model to the primary once its cooldown is over (model_change reason revert)."}
	BudgetTokens = Metric{"musepi.retry.budget.tokens", Gauge, "{token}", []string{"provider"},
		"Tokens left in the provider's retry budget (retry.budget.enabled)."}
	BudgetHeld = Metric{"musepi.retry.budget.held", Gauge, "{retry}", []string{"provider"},
		"Retries held now by the provider's spent retry budget."}
	BudgetDelayed = Metric{"musepi.retry.budget.delayed", ObservedCount, "{retry}", []string{"provider"},
		"Retries the provider's retry budget delayed past their backoff."}
	Sessions = Metric{"musepi.sessions", Gauge, "{session}", []string{"state"},
		"Open sessions by state: idle, selecting_credential, streaming, running_tools, deciding, backoff, compacting."}
	Prompts = Metric{"musepi.prompts", Counter, "{prompt}", []string{"outcome"},
		"Prompts settled (agent_settled), by outcome: success or failure."}
	RequestDuration = Metric{"musepi.provider.request.duration", Histogram, "s", []string{"provider", "model", "outcome"},
		"Provider calls (one streamed turn each), from the request to the end of the stream, by outcome: ok, error or aborted."}
	RequestErrors = Metric{"musepi.provider.request.errors", Counter, "{request}", []string{"provider", "model", "status"},
		"Provider calls that failed, by HTTP status (\"none\" when the failure had none: network errors, stalls, refusals)."}
	GenAIOperationDuration = Metric{genaiconv.ClientOperationDuration{}.Name(), Histogram, genaiconv.ClientOperationDuration{}.Unit(),
		[]string{AttrGenAIOperation, AttrGenAIProvider, AttrGenAIRequestModel, AttrGenAIResponseModel, AttrErrorType},
		"OpenTelemetry's GenAI client operation duration: each provider call (one streamed turn), from the request to the end of the stream, with error.type when it failed."}
	GenAITokenUsage = Metric{genaiconv.ClientTokenUsage{}.Name(), Histogram, genaiconv.ClientTokenUsage{}.Unit(),
		[]string{AttrGenAIOperation, AttrGenAIProvider, AttrGenAIRequestModel, AttrGenAIResponseModel, AttrGenAITokenType},
		"OpenTelemetry's GenAI client token usage: the input (cached included) and output tokens of each provider call that reported its usage."}
	RateLimitRemaining = Metric{"musepi.ratelimit.remaining", Gauge, "{unit}", []string{"provider", "credential", "limit"},
		"What each key has left of each rate limit known (pacing), by limit: requests, tokens, input_tokens, output_tokens; below 0 when more was spent than the window holds."}
	PacingWait = Metric{"musepi.pacing.wait", Histogram, "s", []string{"provider", "limit"},
		"How long turns waited for their key's rate-limit budget (from rate_limit_wait until the turn went out), in seconds, by the limit waited for."}
	PacingWaiting = Metric{"musepi.pacing.waiting", Gauge, "{turn}", []string{"provider", "priority"},
		"Turns waiting now for a rate-limit budget, by priority: high, normal, low."}
	ConcurrencyLimit = Metric{"musepi.concurrency.limit", Gauge, "{call}", []string{"provider", "model"},
		"The overload limiter's concurrency limit of each model that has had a call (WithOverloadLimiter): how many calls to it may be in flight now."}
	ConcurrencyInFlight = Metric{"musepi.concurrency.inflight", Gauge, "{call}", []string{"provider", "model"},
		"Calls in flight now to each model that has had a call, as the overload limiter counts them (each holds a place within the limit)."}
	CapacityWait = Metric{"musepi.capacity.wait", Histogram, "s", []string{"provider", "priority"},
		"How long turns waited for a place within their model's concurrency limit (from capacity_wait until the place was granted, or the wait was given up: abort, abort_retry, the session closed), in seconds, by priority: high, normal, low."}
	EventsLost = Metric{"musepi.telemetry.events_lost", Counter, "{event}", nil,
		"Session events the telemetry subscriber missed because it fell behind (events_lost); counters may then be short."}
)

// All lists every metric.
var All = []*Metric{&RetryAttempts, &RetryBackoff, &RetryWaiting, &RetryChains, &RetryChainsOpen,
	&UsageLimits, &CredentialSwitches, &FallbacksApplied, &FallbacksSucceeded, &FallbacksReverted,
	&BudgetTokens, &BudgetHeld, &BudgetDelayed, &Sessions, &Prompts, &RequestDuration, &RequestErrors,
	&GenAIOperationDuration, &GenAITokenUsage, &RateLimitRemaining, &PacingWait, &PacingWaiting,
	&ConcurrencyLimit, &ConcurrencyInFlight, &CapacityWait, &EventsLost}

// secondsBuckets are the histogram boundaries of backoffs and provider
// calls: from 50 ms to the 5 minute retry.maxDelayMs default and beyond.
var secondsBuckets = []float64{0, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 900, 1800}

// instruments are the synchronous instruments, recorded as events and
// provider calls happen.
type instruments struct {
	attempts, chains, usageLimits, credSwitches          metric.Int64Counter
	fallbackApplied, fallbackSucceeded, fallbackReverted metric.Int64Counter
	prompts, requestErrors, eventsLost                   metric.Int64Counter
	backoff, requestDuration, genAIDuration, pacingWait  metric.Float64Histogram
	capacityWait                                         metric.Float64Histogram
	genAITokens                                          metric.Int64Histogram
	waiting                                              metric.Int64UpDownCounter
}

// newInstruments creates the synchronous instruments on meter.
func newInstruments(meter metric.Meter) (*instruments, error) {
	var in instruments
	var errs []error
	counter := func(m *Metric) metric.Int64Counter {
		c, err := meter.Int64Counter(m.Name, metric.WithUnit(m.Unit), metric.WithDescription(m.Description))
		errs = append(errs, err)
		return c
	}
	histogram := func(m *Metric, buckets []float64) metric.Float64Histogram {
		h, err := meter.Float64Histogram(m.Name, metric.WithUnit(m.Unit), metric.WithDescription(m.Description),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	in.attempts, in.chains, in.usageLimits = counter(&RetryAttempts), counter(&RetryChains), counter(&UsageLimits)
	in.credSwitches, in.prompts = counter(&CredentialSwitches), counter(&Prompts)
	in.fallbackApplied, in.fallbackSucceeded = counter(&FallbacksApplied), counter(&FallbacksSucceeded)
	in.fallbackReverted = counter(&FallbacksReverted)
	in.requestErrors, in.eventsLost = counter(&RequestErrors), counter(&EventsLost)
	in.backoff, in.requestDuration = histogram(&RetryBackoff, secondsBuckets), histogram(&RequestDuration, secondsBuckets)
	in.genAIDuration = histogram(&GenAIOperationDuration, genAIDurationBuckets)
	in.pacingWait, in.capacityWait = histogram(&PacingWait, secondsBuckets), histogram(&CapacityWait, secondsBuckets)
	tokens, err := meter.Int64Histogram(GenAITokenUsage.Name, metric.WithUnit(GenAITokenUsage.Unit),
		metric.WithDescription(GenAITokenUsage.Description), metric.WithExplicitBucketBoundaries(genAITokenBuckets...))
	in.genAITokens, errs = tokens, append(errs, err)
	waiting, err := meter.Int64UpDownCounter(RetryWaiting.Name, metric.WithUnit(RetryWaiting.Unit),
		metric.WithDescription(RetryWaiting.Description))
	in.waiting = waiting
	if err := errors.Join(append(errs, err)...); err != nil {
		return nil, fmt.Errorf("telemetry: create instruments: %w", err)
	}
	return &in, nil
}
