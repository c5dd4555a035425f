package provider

import (
	"net/http"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider/ratelimit"
)

// RateLimitsOf reads the rate-limit headers of res, a response whose
// headers arrived at now, for AssistantMessage.RateLimits (see package
// ratelimit); nil without a response or when it announced none.
func RateLimitsOf(res *http.Response, now time.Time) *messages.RateLimits {
	if res == nil {
		return nil
	}
	return ratelimit.ParseHTTP(res.Header, now).Proto()
}
