package retry

import "strconv"

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
var familyRows = func() (rows [ReasonlessAbort + 1][]compiled) {
	for _, p := range patterns {
		rows[p.class] = append(rows[p.class], compile(p))
	}
	return rows
}()

// compiled is a pattern whose substrings carry their bigrams.
type compiled struct {
	pattern
	all, any, none []needle
}

// needle is a substring and the bigrams a text needs to hold it. It occurs
// in a text (with the text's ASCII letters lowered) when mayBeIn and isIn
// hold, given a set holding at least the lowered text's bigrams: the
// bigrams rule most texts out without a scan, and mayBeIn, the first part,
// is inlined.
type needle struct {
	s     string
	grams []uint16 // distinct, in order; at least one
}

func compile(p pattern) compiled {
	return compiled{pattern: p, all: needles(p.all...), any: needles(p.any...), none: needles(p.none...)}
}

// needles are subs with their bigrams. A substring is at least two bytes
// long (one bigram).
func needles(subs ...string) []needle {
	out := make([]needle, len(subs))
	for i, s := range subs {
		if len(s) < 2 {
			panic("retry: pattern substring " + strconv.Quote(s) + " shorter than a bigram")
		}
		out[i] = needle{s: s, grams: gramsOf(s)}
	}
	return out
}

// matchFamily reports whether any row of class c matches text (lowered);
// set holds at least the lowered text's bigrams.
func matchFamily(c Class, set *bigramSet, text string, status int) bool {
	rows := familyRows[c]
	for i := range rows {
		if rows[i].match(set, text, status) {
			return true
		}
	}
	return false
}

func (p *compiled) match(set *bigramSet, text string, status int) bool {
	for i := range p.all {
		if !p.all[i].mayBeIn(set, text) || !p.all[i].isIn(set, text) {
			return false
		}
	}
	if len(p.any) > 0 && !anyIn(p.any, set, text) {
		return false
	}
	if anyIn(p.none, set, text) {
		return false
	}
	if len(p.status) > 0 && !statusMatches(p.status, text, status) {
		return false
	}
	if p.clientStatusVetoes && isFinalClientStatus(status) {
		return false
	}
	return true
}

// anyIn reports whether any of ns occurs in text (see needle).
func anyIn(ns []needle, set *bigramSet, text string) bool {
	for i := range ns {
		if ns[i].mayBeIn(set, text) && ns[i].isIn(set, text) {
			return true
		}
	}
	return false
}

// mayBeIn reports whether text is long enough and holds n's first bigram.
func (n *needle) mayBeIn(set *bigramSet, text string) bool {
	return len(n.s) <= len(text) && set.has(n.grams[0])
}

// isIn reports whether text, of which mayBeIn holds, holds n's other
// bigrams and n.
func (n *needle) isIn(set *bigramSet, text string) bool {
	for _, g := range n.grams[1:] {
		if !set.has(g) {
			return false
		}
	}
	return containsLowered(text, n.s)
}

// containsLowered reports whether sub occurs in s with s's ASCII letters
// lowered (sub is compared as it is).
func containsLowered(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		j := 0
		for j < len(sub) && lowerASCII[s[i+j]] == sub[j] {
			j++
		}
		if j == len(sub) {
			return true
		}
	}
	return false
}

// lowerASCII maps a byte to its lower case if it is an ASCII letter, else to
// itself.
var lowerASCII = func() (t [256]byte) {
	for c := range t {
		t[c] = byte(c)
		if 'A' <= c && c <= 'Z' {
			t[c] += 'a' - 'A'
		}
	}
	return t
}()

// bigramSet is a 4096-bit set of hashed byte pairs of a text.
type bigramSet [64]uint64

func gramHash(a, b byte) uint16 { return (uint16(a)*131 + uint16(b)) & 4095 }

// fill adds the bigrams of text with its ASCII letters lowered.
func (s *bigramSet) fill(text string) {
	for i := 0; i+1 < len(text); i++ {
		h := gramHash(lowerASCII[text[i]], lowerASCII[text[i+1]])
		s[h>>6] |= 1 << (h & 63)
	}
}

func (s *bigramSet) has(h uint16) bool { return s[h>>6]&(1<<(h&63)) != 0 }

// gramsOf is the distinct bigrams of sub, in order.
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
