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
	// clientStatusVetoes: a 4xx HTTP status other than 408, 413, 425 and 429
	// (a client error the provider will answer the same way again) keeps the row from matching.
	clientStatusVetoes bool
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
		"exceeds the context window",
		"exceeds the model's context window",
		"input is too long",
	}},
	// "Too many tokens" is overflow, except AWS Bedrock's throttling
	// ("Too many tokens, please wait before trying again.").
	{class: ContextOverflow, all: []string{"too many tokens"}, none: []string{"wait", "try again", "trying again", "per min", "throttl"}},
	// "Request too large" is overflow, except OpenAI's tokens-per-minute limit.
	{class: ContextOverflow, all: []string{"request too large"}, none: []string{"per min", "(tpm)"}},
	// A 400/413 whose body says the input exceeds the model's limit.
	{class: ContextOverflow, status: []int{400, 413},
		all: []string{"exceed"}, any: []string{"context", "token", "input", "maximum", "limit"},
		none: []string{"quota", "rate limit", "per min", "image", "bytes", " mb"}},

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
		"requires more credits",
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
		"tokens per min",
		"throttl", // AWS ThrottlingException, "request was throttled"
		// server classes in words
		"service unavailable",
		"service_unavailable",
		"server error",
		"server_error",
		"internal error",
		"internal_error",
		"bad gateway",
		"gateway timeout",
		"serviceunavailable",             // AWS ServiceUnavailableException
		"internalserverexception",        // AWS InternalServerException
		"currently unavailable",          // Vertex: "The service is currently unavailable."
		"server had an error",            // OpenAI, Azure OpenAI
		"unable to process your request", // AWS Bedrock
		"deadline exceeded",              // gRPC DEADLINE_EXCEEDED (Vertex, Gemini)
		"deadline_exceeded",
		// provider-suggested retry
		"please retry",
		"retry your request",
		"try again",
		"try your request again", // AWS Bedrock
		"try the request again",  // Google Vertex
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
		"und_err_socket", // undici
		"premature close",
		"socket disconnected", // "Client network socket disconnected before secure TLS connection was established"
		// network, Bun wordings
		"socket connection was closed unexpectedly",
		"connectionclosed",
		"connectionrefused",
		"failedtoopensocket",
		"unable to connect",
		// network, Python httpx and aiohttp wordings (as proxies relay them)
		"server disconnected",
		"peer closed connection",
		"incomplete chunked read",
		"response payload is not completed",
		"cannot connect to host",
		"remoteprotocolerror",
		// network, Go wordings
		"no such host",
		"unexpected eof",
		"connection reset by peer",
		"broken pipe",
		"i/o timeout",
		"http2: stream closed",
		"server closed idle connection",
		"use of closed network connection",
		"goaway",
		"refused_stream",
		"no route to host",
		"network is unreachable",
		"ehostunreach",
		"enetunreach",
		"econnaborted",
		"temporary failure in name resolution",
		"server misbehaving",
		// stream-envelope failures before the first event
		"before message_start",
		"before the first event",
	}, clientStatusVetoes: true},
	{class: Transient, status: []int{429, 500, 502, 503, 504, 529}, clientStatusVetoes: true},
}

// familyRows is the table compiled and indexed by class, so a family is
// checked in one pass.
var familyRows = func() map[Class][]compiled {
	m := make(map[Class][]compiled)
	for _, p := range patterns {
		m[p.class] = append(m[p.class], compile(p))
	}
	return m
}()

// compiled is a pattern whose substrings carry their bigram fingerprints.
type compiled struct {
	pattern
	all, any, none []needle
}

// needle is a substring and the bigram-set bits it needs in a text.
type needle struct {
	s     string
	grams []uint16
}

func compile(p pattern) compiled {
	needles := func(subs []string) []needle {
		out := make([]needle, len(subs))
		for i, s := range subs {
			out[i] = needle{s: s, grams: gramsOf(s)}
		}
		return out
	}
	return compiled{pattern: p, all: needles(p.all), any: needles(p.any), none: needles(p.none)}
}

// matchFamily reports whether any row of class c matches lowered text,
// whose bigrams are in set.
func matchFamily(c Class, set *bigramSet, lower string, status int) bool {
	rows := familyRows[c]
	for i := range rows {
		if rows[i].match(set, lower, status) {
			return true
		}
	}
	return false
}

func (p *compiled) match(set *bigramSet, lower string, status int) bool {
	for i := range p.all {
		if !p.all[i].in(set, lower) {
			return false
		}
	}
	if len(p.any) > 0 && !anyIn(p.any, set, lower) {
		return false
	}
	if anyIn(p.none, set, lower) {
		return false
	}
	if len(p.status) > 0 && !statusMatches(p.status, lower, status) {
		return false
	}
	if p.clientStatusVetoes && isFinalClientStatus(status) {
		return false
	}
	return true
}

func anyIn(needles []needle, set *bigramSet, lower string) bool {
	for i := range needles {
		if needles[i].in(set, lower) {
			return true
		}
	}
	return false
}

// in reports whether n occurs in lower; the bigram set rules most texts out
// without scanning them.
func (n *needle) in(set *bigramSet, lower string) bool {
	for _, g := range n.grams {
		if !set.has(g) {
			return false
		}
	}
	return strings.Contains(lower, n.s)
}

// bigramSet is a 4096-bit set of hashed byte pairs of a text.
type bigramSet [64]uint64

func gramHash(a, b byte) uint16 { return (uint16(a)*131 + uint16(b)) & 4095 }

func (s *bigramSet) fill(text string) {
	for i := 0; i+1 < len(text); i++ {
		h := gramHash(text[i], text[i+1])
		s[h>>6] |= 1 << (h & 63)
	}
}

func (s *bigramSet) has(h uint16) bool { return s[h>>6]&(1<<(h&63)) != 0 }

func gramsOf(sub string) []uint16 {
	var set bigramSet
	var out []uint16
	for i := 0; i+1 < len(sub); i++ {
		h := gramHash(sub[i], sub[i+1])
		if !set.has(h) {
			set[h>>6] |= 1 << (h & 63)
			out = append(out, h)
		}
	}
	return out
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// isFinalClientStatus reports a 4xx status that retrying cannot fix.
func isFinalClientStatus(status int) bool {
	switch status {
	case 408, 413, 425, 429: // timeout, too large (Groq's TPM limit), too early, rate limit
		return false
	}
	return status >= 400 && status < 500
}

// statusMatches reports whether status, or any whole number in text, is one
// of want. A whole number is a run of three digits that is not part of a
// longer number ("130500", "1,500", "5.503"), an identifier ("req_502a",
// "id15003") or a quantity with a unit ("503ms").
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
		for j < len(text) && isDigit(text[j]) {
			j++
		}
		if j-i == 3 && standsAlone(text, i, j) {
			n := int(text[i]-'0')*100 + int(text[i+1]-'0')*10 + int(text[i+2]-'0')
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

// standsAlone reports whether text[i:j] is bounded by neither word
// characters nor a decimal or thousands separator joined to more digits.
func standsAlone(text string, i, j int) bool {
	if i > 0 {
		c := text[i-1]
		if isWord(c) || ((c == '.' || c == ',') && i > 1 && isDigit(text[i-2])) {
			return false
		}
	}
	if j < len(text) {
		c := text[j]
		if isWord(c) || ((c == '.' || c == ',') && j+1 < len(text) && isDigit(text[j+1])) {
			return false
		}
	}
	return true
}

func isWord(c byte) bool {
	return isDigit(c) || c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
