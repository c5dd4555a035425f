package ratelimit

import (
	"time"

	"github.com/musepi/musepi/messages"
)

// Proto returns s as the wire message that AssistantMessage.rate_limits
// carries; nil when s holds no limit. Resets are rounded up to the
// millisecond, so that a reset read back is never earlier.
func (s Snapshot) Proto() *messages.RateLimits {
	if s.Len() == 0 {
		return nil
	}
	return &messages.RateLimits{
		Requests:     s.limitProto(Requests),
		Tokens:       s.limitProto(Tokens),
		InputTokens:  s.limitProto(InputTokens),
		OutputTokens: s.limitProto(OutputTokens),
	}
}

func (s Snapshot) limitProto(k Kind) *messages.RateLimit {
	l, ok := s.Get(k)
	if !ok {
		return nil
	}
	var m messages.RateLimit
	if l.HasLimit {
		m.Limit = &l.Limit
	}
	if l.HasRemaining {
		m.Remaining = &l.Remaining
	}
	if !l.Reset.IsZero() {
		m.ResetUnixMs = l.Reset.UnixMilli()
		if time.UnixMilli(m.ResetUnixMs).Before(l.Reset) {
			m.ResetUnixMs++
		}
	}
	return &m
}

// FromProto returns the snapshot m carries (none for nil). It trusts m no
// more than Parse trusts headers: a limit not above 0, a negative remaining
// count or a reset not after the epoch is ignored, and a kind left with
// neither count is absent. Resets are not compared with the clock.
func FromProto(m *messages.RateLimits) Snapshot {
	var s Snapshot
	s.Set(Requests, limitFromProto(m.GetRequests()))
	s.Set(Tokens, limitFromProto(m.GetTokens()))
	s.Set(InputTokens, limitFromProto(m.GetInputTokens()))
	s.Set(OutputTokens, limitFromProto(m.GetOutputTokens()))
	return s
}

func limitFromProto(m *messages.RateLimit) Limit {
	var l Limit
	if m == nil {
		return l
	}
	if m.Limit != nil && *m.Limit > 0 {
		l.Limit, l.HasLimit = *m.Limit, true
	}
	if m.Remaining != nil && *m.Remaining >= 0 {
		l.Remaining, l.HasRemaining = *m.Remaining, true
	}
	if m.ResetUnixMs > 0 {
		l.Reset = time.UnixMilli(m.ResetUnixMs)
	}
	return l
}
