package fakellm

import (
	"net/http"
	"sort"
	"strings"
)

// errSpec is an error as one API renders it.
type errSpec struct {
	status int
	typ    string // OpenAI "type" / Anthropic error.type
	code   string // OpenAI "code" ("" renders null)
	param  string // OpenAI "param" ("" renders null)
	msg    string // may hold {model} and {previous_response_id}
}

// preset is a realistic error per API family. responses overrides openai
// for the Responses API when set.
type preset struct {
	anthropic errSpec
	openai    errSpec
	responses *errSpec
}

// presets never add retry-hint headers or hint wording ("try again in
// 20s"): a scenario adds those explicitly with "headers" or "message", so
// the delays a client computes stay under the scenario's control.
var presets = map[string]preset{
	"rate_limit": {
		anthropic: errSpec{429, "rate_limit_error", "", "",
			"This request would exceed the rate limit for your organization of 50 requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage."},
		openai: errSpec{429, "requests", "rate_limit_exceeded", "",
			"Rate limit reached for {model} in organization org-fakellm on requests per min (RPM): Limit 500, Used 500, Requested 1. Visit https://platform.openai.com/account/rate-limits to learn more."},
	},
	"overloaded": {
		anthropic: errSpec{529, "overloaded_error", "", "", "Overloaded"},
		openai:    errSpec{503, "server_error", "", "", "The server is overloaded or not ready yet."},
	},
	"server_error": {
		anthropic: errSpec{500, "api_error", "", "", "Internal server error"},
		openai:    errSpec{500, "server_error", "", "", "The server had an error while processing your request. Sorry about that!"},
	},
	"bad_gateway": {
		anthropic: errSpec{502, "api_error", "", "", "Bad gateway"},
		openai:    errSpec{502, "server_error", "", "", "Bad gateway."},
	},
	"unavailable": {
		anthropic: errSpec{503, "api_error", "", "", "Service unavailable"},
		openai:    errSpec{503, "server_error", "", "", "Service unavailable."},
	},
	"gateway_timeout": {
		anthropic: errSpec{504, "timeout_error", "", "", "Gateway timeout: the request timed out"},
		openai:    errSpec{504, "server_error", "", "", "Gateway timeout."},
	},
	"quota": {
		anthropic: errSpec{402, "billing_error", "", "",
			"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."},
		openai: errSpec{429, "insufficient_quota", "insufficient_quota", "",
			"You exceeded your current quota, please check your plan and billing details."},
	},
	"usage_limit": {
		anthropic: errSpec{429, "rate_limit_error", "", "",
			"Claude AI usage limit reached for this period. Please wait for your limit to reset."},
		openai: errSpec{429, "usage_limit_reached", "usage_limit_reached", "",
			"The usage limit has been reached"},
	},
	"context_overflow": {
		anthropic: errSpec{400, "invalid_request_error", "", "",
			"prompt is too long: 213462 tokens > 200000 maximum"},
		openai: errSpec{400, "invalid_request_error", "context_length_exceeded", "messages",
			"This model's maximum context length is 128000 tokens. However, your messages resulted in 130500 tokens."},
		responses: &errSpec{400, "invalid_request_error", "context_length_exceeded", "input",
			"Your input exceeds the context window of this model. Please adjust your input and try again."},
	},
	"auth": {
		anthropic: errSpec{401, "authentication_error", "", "", "invalid x-api-key"},
		openai: errSpec{401, "invalid_request_error", "invalid_api_key", "",
			"Incorrect API key provided: {key}. You can find your API key at https://platform.openai.com/account/api-keys."},
	},
	"stale_response": {
		anthropic: errSpec{400, "invalid_request_error", "", "",
			"Previous response with id '{previous_response_id}' not found."},
		openai: errSpec{400, "invalid_request_error", "previous_response_not_found", "previous_response_id",
			"Previous response with id '{previous_response_id}' not found."},
	},
}

func presetNames() []string {
	names := make([]string, 0, len(presets))
	for k := range presets {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// isAnthropic reports whether api renders errors the Anthropic way.
func isAnthropic(api string) bool { return api == APIAnthropic }

// resolveError turns a Respond's error fields into the spec one API
// renders: the preset first, then the explicit fields on top, then
// defaults by status.
func resolveError(api string, r *Respond, req *apiRequest) errSpec {
	var e errSpec
	if p, ok := presets[r.Preset]; ok {
		switch {
		case isAnthropic(api):
			e = p.anthropic
		case api == APIOpenAIResponses && p.responses != nil:
			e = *p.responses
		default:
			e = p.openai
		}
	}
	if r.Status != 0 {
		e.status = r.Status
	}
	if r.ErrorType != "" {
		e.typ = r.ErrorType
	}
	if r.ErrorCode != "" {
		e.code = r.ErrorCode
	}
	if r.Message != "" {
		e.msg = r.Message
	}
	if e.status == 0 {
		if r.StreamError {
			e.status = statusForType(api, e.typ)
		} else {
			e.status = http.StatusInternalServerError
		}
	}
	if e.typ == "" {
		e.typ = defaultType(api, e.status)
	}
	if e.msg == "" {
		e.msg = http.StatusText(e.status)
		if e.msg == "" {
			e.msg = "Error"
		}
	}
	e.msg = expand(e.msg, req)
	return e
}

// streamErrorSpec is what a stream_error respond sends: the explicit
// fields, else the preset, else overloaded (Anthropic) or server_error
// (OpenAI).
func streamErrorSpec(api string, r *Respond, req *apiRequest) errSpec {
	if r.Preset == "" && r.ErrorType == "" && r.Message == "" {
		def := *r
		if isAnthropic(api) {
			def.Preset = "overloaded"
		} else {
			def.Preset = "server_error"
		}
		return resolveError(api, &def, req)
	}
	return resolveError(api, r, req)
}

func expand(msg string, req *apiRequest) string {
	if req == nil || !strings.Contains(msg, "{") {
		return msg
	}
	prev := req.PreviousResponseID
	if prev == "" {
		prev = "resp_unknown"
	}
	return strings.NewReplacer(
		"{model}", req.Model,
		"{key}", maskKey(req.key),
		"{previous_response_id}", prev,
	).Replace(msg)
}

// maskKey shows a key the way OpenAI's auth errors do: "sk-ab***********wxyz".
func maskKey(k string) string {
	if len(k) <= 8 {
		return strings.Repeat("*", len(k))
	}
	return k[:4] + strings.Repeat("*", len(k)-8) + k[len(k)-4:]
}

func defaultType(api string, status int) string {
	if isAnthropic(api) {
		switch status {
		case 400:
			return "invalid_request_error"
		case 401:
			return "authentication_error"
		case 402:
			return "billing_error"
		case 403:
			return "permission_error"
		case 404:
			return "not_found_error"
		case 413:
			return "request_too_large"
		case 429:
			return "rate_limit_error"
		case 504:
			return "timeout_error"
		case 529:
			return "overloaded_error"
		}
		return "api_error"
	}
	switch {
	case status == 429:
		return "rate_limit_exceeded"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// statusForType is the HTTP status an in-stream error gets when the
// request did not ask to stream and the error must be an HTTP error.
func statusForType(api, typ string) int {
	switch typ {
	case "overloaded_error":
		return 529
	case "rate_limit_error", "rate_limit_exceeded", "requests", "tokens", "insufficient_quota", "usage_limit_reached":
		return 429
	case "invalid_request_error":
		return 400
	case "authentication_error":
		return 401
	case "timeout_error":
		return 504
	}
	return 500
}
