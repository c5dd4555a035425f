package provider_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/musepi/musepi/provider"
)

func TestRateLimitsOf(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	if rl := provider.RateLimitsOf(nil, now); rl != nil {
		t.Errorf("no response: %v", rl)
	}
	res := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}}
	if rl := provider.RateLimitsOf(res, now); rl != nil {
		t.Errorf("no limit headers: %v", rl)
	}
	res.Header.Set("X-Ratelimit-Remaining-Tokens", "12")
	res.Header.Set("X-Ratelimit-Reset-Tokens", "20ms")
	rl := provider.RateLimitsOf(res, now)
	tok := rl.GetTokens()
	if rl.GetRequests() != nil || tok.Limit != nil || tok.GetRemaining() != 12 || tok.GetResetUnixMs() != now.UnixMilli()+20 {
		t.Errorf("limits %v", rl)
	}
}
