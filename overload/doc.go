// Package overload keeps one adaptive concurrency limit per provider's
// model: how many calls may be in flight to it at once, lowered when the
// provider says it is overloaded and raised while it answers, so that
// turns wait in priority order instead of retrying into a provider that
// has no room. Pure like pacing.Pacer: no goroutines, no clock (every
// method that needs the time takes now), no randomness; an actor owns a
// Limiter and carries out what it returns.
//
// # What it follows, and why
//
// Envoy's adaptive concurrency filter and Netflix's Gradient2 and Vegas
// limits infer overload from latency alone: a generic upstream does not
// say it is overloaded, it slows down. Envoy moves its limit by the
// gradient (minRTT + buffer) / sampleRTT (clamped to [0.5, 2]) every
// sampling window, and pins the concurrency low now and then to measure
// minRTT again; Gradient2 compares a short-term RTT with an exponentially
// smoothed long-term one (gradient clamped to [0.5, 1], smoothed by 0.2);
// Vegas estimates the queue as limit × (1 − RTTnoLoad/RTT). failsafe-go's
// adaptive limiter is Vegas-like, on a p90 of recent execution times
// against a weighted moving baseline, with correlation checks. All of
// them read the whole call's latency.
//
// An LLM call's whole latency says little of the provider's load: it is
// mostly the answer's length (a 4,000-token answer streams for a minute, a
// short one ends in a second), and a stream holds its place for all of it.
// But LLM providers do say when they are overloaded: Anthropic's 529
// overloaded_error (also sent inside a stream), OpenAI's 503 and 500 in
// overload wording. That is a loss signal, as a dropped packet is to TCP,
// and it comes at once. So the limit follows Netflix's AIMDLimit, which
// reacts to drops and time-outs, with TCP's refinements:
//
//   - An overload answer or a time-out lowers the limit to Backoff (0.9)
//     times the calls that were in flight when the refused call went out,
//     as TCP takes its window from the flight size (RFC 5681), not from a
//     limit that may never have been used: a limit far above the
//     capacity comes down to what the provider took in one step.
//   - At most one decrease per round, as NewReno (RFC 6582): the refusals
//     of calls sent before the last decrease answered the old limit, and
//     only bring the limit down to the lowest level one of them saw; they
//     do not compound. Backoff is 0.9, not TCP's 0.5, because the decrease
//     is taken from what was in flight and the refusal is explicit: the
//     sawtooth then stays above 90 % of the capacity.
//   - Answers at normal latency raise the limit, by one per round
//     (1/limit per answer, TCP's congestion avoidance) for ProbeAfter after
//     a decrease, and by one per answer after that (doubling every round,
//     TCP's slow start), so a provider whose capacity came back is found
//     within a few rounds. Only when the limit is used: an answer sent
//     while fewer than half the limit were in flight does not raise it
//     (Netflix's "app-limited" rule).
//   - The limit never goes below 1: one probe always goes out.
//   - A model starts at Initial (100), not at Max (1,000), and grows by
//     one an answer until its first overload (TCP's slow start, and the
//     initial limit of Netflix's and failsafe-go's limiters). Nothing can
//     stop a cold burst in its first round: no answer has come yet. Started
//     at Max, 2,000 clients against a capacity of 200 got 15 % overload
//     answers over two minutes, most of them in that round; started at
//     Initial, 2.6 % (sim_test.go). The price: a cold burst larger than
//     Initial waits a round or two while the limit doubles
//     (TestHealthyProviderNeverBinds); up to Initial calls never wait.
//
// Latency still counts, as Gradient2's gradient: the time to first token
// (the first content of a stream; the whole answer when not streamed) is
// compared with a baseline, its moving average. It is the part of an LLM
// call that the provider's queue and prefill make, and it does not depend
// on the answer's length; the output's own pace (latency per output
// token) reflects batch pressure but not the admission queue, where
// overload builds first. An answer whose time to first token is more than
// Tolerance (2) times the baseline (prompt sizes vary, so the tolerance
// is wider than Gradient2's 1.5) does not raise the limit, and lowers it
// by Gradient2's smoothed gradient: limit × (1 − 0.2 × (1 − g)), g =
// Tolerance × baseline / sample clamped to [0.5, 1], once per round like
// an overload. So a provider that slows down before it fails is eased off
// before its first 529. Envoy's minRTT probing is not followed: pinning
// the concurrency low every minute would cost the whole fleet's turns.
//
// 429s are not this package's business: rate limits are announced and
// pacing spends them. A 429, a refused request, an abort or a network
// failure only frees the call's place (Neutral).
// OutcomeOf reads a call's Outcome off its last message, with retry's
// classification: the one place that says what counts as an overload.
//
// # Queue
//
// A call that finds its model's limit full waits, in pacing's priority
// order (High before Normal before Low, first come first served within
// one), until Release frees a place for it (Grant). Cancel forgets a
// waiting call (an abort). The queue is the limiter's own, not the
// Pacer's: pacing's waiting calls hold credentials and budgets that
// refill over time, these wait for places that answers free; they share
// the order (pacing.Priority), not the placement.
package overload
