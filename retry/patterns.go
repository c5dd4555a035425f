package retry

import "strings"

// pattern is one row of the classification table. A row matches lowered
// error text when every field that is set holds.
type pattern struct {
	class  Class
	all    []string // every substring occurs
	any    []string // at least one substring occurs
	none   []string // no substring occurs
	status []int    // the HTTP status, or a whole number in the text, is one of these
}

// patterns is the whole classification table, lowered text only. Families
// are checked in the order ContextOverflow, StaleReplay, UsageLimit,
// Transient; within a family the first matching row wins.
var patterns = []pattern{
	// Context overflow: never retried, routed to compaction.
	{class: ContextOverflow, any: []string{
		"prompt is too long",
		"maximum context length",
		"context length exceeded",
		"context_length_exceeded",
		"too many tokens",
		"exceeds the context window",
		"exceeds the model's context window",
		"input is too long",
	}},
	// "Request too large" is overflow, except OpenAI's tokens-per-minute limit.
	{class: ContextOverflow, all: []string{"request too large"}, none: []string{"per min", "(tpm)"}},
	// A 400/413 whose body says the input exceeds the model's limit.
	{class: ContextOverflow, status: []int{400, 413},
		all: []string{"exceed"}, any: []string{"context", "token", "input", "maximum", "limit"},
		none: []string{"quota", "rate limit", "per min"}},

	// Stale replay: an OpenAI Responses item or response id that is gone.
	{class: StaleReplay, all: []string{"item with id", "not found"}},
	{class: StaleReplay, all: []string{"previous_response_id"},
		any: []string{"invalid", "expired", "not found", "does not exist"}},
	{class: StaleReplay, all: []string{"previous response with id", "not found"}},

	// Usage limit: quota, usage, billing and credit limits.
	{class: UsageLimit, any: []string{
		"usage limit",
		"usage_limit_reached",
		"limit_reached",
		"quota exceeded",
		"quota reached",
		"exceeded your current quota",
		"quota_exceeded",
		"insufficient_quota",
		"resource exhausted",
		"resource_exhausted",
		"exhausted your capacity",
		"insufficient balance",
		"insufficient_balance",
		"billing hard limit",
		"billing limit",
		"billing_limit",
		"credit balance is too low",
		"credit limit",
		"out of credits",
		"insufficient credits",
	}},
	{class: UsageLimit, status: []int{429, 402}, all: []string{"quota"}},

	// Transient: overload, rate limits, server classes, retry wording, network.
	{class: Transient, any: []string{
		// overload and provider-side errors
		"overloaded",
		"provider returned error",
		// rate limits
		"rate limit",
		"rate_limit",
		"ratelimit",
		"too many requests",
		// server classes in words
		"service unavailable",
		"service_unavailable",
		"server error",
		"server_error",
		"internal error",
		"internal_error",
		"bad gateway",
		"gateway timeout",
		// provider-suggested retry
		"please retry",
		"retry your request",
		"try again",
		"retry delay",
		// network, Node wordings
		"connection error",
		"connection refused",
		"connection reset",
		"connection closed",
		"connection lost",
		"econnreset",
		"econnrefused",
		"etimedout",
		"epipe",
		"getaddrinfo",
		"enotfound",
		"eai_again",
		"upstream connect error",
		"reset before headers",
		"socket hang up",
		"unexpected socket close",
		"other side closed",
		"fetch failed",
		"terminated",
		"timeout",
		"timed out",
		"stream stalled",
		"websocket closed",
		"websocket connection closed",
		// network, Go wordings
		"no such host",
		"unexpected eof",
		"connection reset by peer",
		"broken pipe",
		"i/o timeout",
		"http2: stream closed",
		"context deadline exceeded",
		"server closed idle connection",
		// stream-envelope failures before the first event
		"before message_start",
		"before the first event",
	}},
	{class: Transient, status: []int{429, 500, 502, 503, 504, 529}},
}

// familyRows indexes patterns by class, so a family is checked in one pass.
var familyRows = func() map[Class][]pattern {
	m := make(map[Class][]pattern)
	for _, p := range patterns {
		m[p.class] = append(m[p.class], p)
	}
	return m
}()

// matchFamily reports whether any row of class c matches lowered text.
func matchFamily(c Class, lower string, status int) bool {
	for i := range familyRows[c] {
		if familyRows[c][i].match(lower, status) {
			return true
		}
	}
	return false
}

func (p *pattern) match(lower string, status int) bool {
	for _, s := range p.all {
		if !strings.Contains(lower, s) {
			return false
		}
	}
	if len(p.any) > 0 && !containsAny(lower, p.any) {
		return false
	}
	if containsAny(lower, p.none) {
		return false
	}
	if len(p.status) > 0 && !statusMatches(p.status, lower, status) {
		return false
	}
	return true
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// statusMatches reports whether status, or any whole number in text (a digit
// run not part of a longer digit run), is one of want.
func statusMatches(want []int, text string, status int) bool {
	for _, w := range want {
		if status == w {
			return true
		}
	}
	for i := 0; i < len(text); {
		if !isDigit(text[i]) {
			i++
			continue
		}
		j := i
		n := 0
		for j < len(text) && isDigit(text[j]) {
			if n < 1000 {
				n = n*10 + int(text[j]-'0')
			}
			j++
		}
		if j-i == 3 && !(i > 0 && text[i-1] == '.') && !(j < len(text) && text[j] == '.' && j+1 < len(text) && isDigit(text[j+1])) {
			for _, w := range want {
				if n == w {
					return true
				}
			}
		}
		i = j
	}
	return false
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
