package provider

import (
	"context"

	"github.com/musepi/musepi/messages"
)

// limitsKey is the context key of WithLimitsSeen.
type limitsKey struct{}

// WithLimitsSeen returns ctx carrying seen, which a provider calls with
// the rate limits a response's headers announce as soon as they arrive,
// before the answer streams (LimitsSeen): pacing learns a key's budget at
// the start of the first call, not at its end. The limits also go in the
// final message's RateLimits, as without it.
func WithLimitsSeen(ctx context.Context, seen func(*messages.RateLimits)) context.Context {
	return context.WithValue(ctx, limitsKey{}, seen)
}

// LimitsSeen gives limits (nil: none announced) to the callback ctx
// carries, if any.
func LimitsSeen(ctx context.Context, limits *messages.RateLimits) {
	if seen, ok := ctx.Value(limitsKey{}).(func(*messages.RateLimits)); ok && limits != nil {
		seen(limits)
	}
}
