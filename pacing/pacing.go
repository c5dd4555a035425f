// Package pacing spends a provider's rate limits before the provider
// refuses: it holds, per credential and kind of limit, a budget that
// configured limits seed and the providers' rate-limit headers correct;
// each call reserves what it needs before it goes out and settles with
// what it used after, and a call that fits nowhere waits in priority order
// until a budget refills.
//
// A Pacer is pure: no goroutines, no clock (every method takes now), no
// locks. Reservations, as pure, keep over it each paced turn's
// reservation, from its reserve to its settle or cancel, and where a
// waiting turn's grant goes; the credentials actor of a provider owns them
// and carries out what they return.
//
// A budget is a token bucket per kind (requests, tokens, input tokens,
// output tokens): its capacity is the window's limit, it refills at the
// limit per minute (configured limits) or at the rate that fills it by the
// announced reset (headers), and a call takes one request, its estimated
// input tokens and its output bound. A kind with no limit known does not
// constrain.
package pacing

import (
	"fmt"
	"time"

	"github.com/musepi/musepi/provider/ratelimit"
)

// Kind is what a limit counts (ratelimit's kinds).
type Kind = ratelimit.Kind

// numKinds is how many kinds there are.
const numKinds = 4

// Priority orders the calls that wait for a budget: every waiting call
// of a higher priority goes before any of a lower one; within one
// priority, first come first served. The zero value is Normal.
type Priority uint8

// The priorities.
const (
	Normal Priority = iota
	High
	Low
)

// Rank is the priority's place in release order: 0 for High, 1 for
// Normal, 2 for Low (and for a value out of range).
func (p Priority) Rank() int {
	switch p {
	case High:
		return 0
	case Normal:
		return 1
	}
	return 2
}

var priorityNames = [...]string{Normal: "normal", High: "high", Low: "low"}

// String is "high", "normal" or "low".
func (p Priority) String() string {
	if int(p) < len(priorityNames) {
		return priorityNames[p]
	}
	return fmt.Sprintf("Priority(%d)", uint8(p))
}

// PriorityOf is the priority a message carries as a number: one out of
// range counts as Low. Every decoder of a priority calls it, once.
func PriorityOf(v int32) Priority { return Priority(min(max(v, 0), int32(Low))) }

// ParsePriority reads "high", "normal" or "low" ("" is normal).
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "high":
		return High, nil
	case "", "normal":
		return Normal, nil
	case "low":
		return Low, nil
	}
	return Normal, fmt.Errorf("priority must be high, normal or low, got %q", s)
}

// Need is what one call takes from its credential's budget: one request,
// its estimated input tokens and its output bound (max_tokens).
type Need struct {
	Input, Output int64
	// Bounded says Output is the call's max_tokens, which the provider
	// charges at admission (without, Output is an estimate of what answers
	// use: see OutputEstimator).
	Bounded bool
}

// of is the need in kind k.
func (n Need) of(k Kind) float64 {
	switch k {
	case ratelimit.Requests:
		return 1
	case ratelimit.Tokens:
		return float64(n.Input + n.Output)
	case ratelimit.InputTokens:
		return float64(n.Input)
	default:
		return float64(n.Output)
	}
}

// Usage is what a call used: whether its request went out, and the tokens
// the provider reported (a failed call reports none).
type Usage struct {
	Sent          bool
	Input, Output int64
	// Refused says the server refused the call (429): it enforces a
	// shorter window than the minute, or others spend the key too.
	Refused bool
	// RetryAfter is the refusal's hint ("retry-after"): the server says
	// earlier calls fail, and a refused call still costs a request
	// (OpenAI), so the key takes nothing before it.
	RetryAfter time.Duration
}

// of is the use in kind k.
func (u Usage) of(k Kind) float64 {
	if !u.Sent {
		return 0
	}
	return Need{Input: u.Input, Output: u.Output}.of(k)
}

// Limits are configured per-minute limits of a credential (0: none). They
// are used until headers announce the credential's limits, and for
// servers that announce none.
type Limits struct {
	RPM, TPM, InputTPM, OutputTPM int64
}

// perMinute is the configured limit of kind k.
func (l Limits) perMinute(k Kind) int64 {
	return [numKinds]int64{l.RPM, l.TPM, l.InputTPM, l.OutputTPM}[k]
}

// Any reports whether any limit is set.
func (l Limits) Any() bool { return l.RPM > 0 || l.TPM > 0 || l.InputTPM > 0 || l.OutputTPM > 0 }
