// Package ratelimit reads the rate-limit state that LLM providers announce
// in their response headers: for each kind of limit (requests, tokens, input
// tokens, output tokens), the window's limit, what remains of it and when it
// refills. It is pure: it keeps no state, starts no goroutine and reads no
// clock (the caller passes the instant the headers arrived).
//
// Two header families are read:
//
//   - OpenAI, and servers compatible with it: x-ratelimit-limit-requests,
//     x-ratelimit-remaining-requests, x-ratelimit-reset-requests, and the
//     same three ending in -tokens. A reset is a Go duration from now
//     ("6m0s", "20ms", "1.5s", "6m0.5s"), read with time.ParseDuration.
//   - Anthropic: anthropic-ratelimit-<kind>-limit, -remaining and -reset,
//     where <kind> is requests, tokens, input-tokens or output-tokens. A
//     reset is an RFC 3339 instant, with or without fractional seconds.
//
// Header values are never trusted; each field is read on its own and
// ignored when it is unusable:
//
//   - a limit must be a base-10 integer above 0, a remaining count a
//     base-10 integer of 0 or more (surrounding spaces allowed); anything
//     else is ignored: absent, empty, negative ("-1", as some compatible
//     servers send), fractional, too large or otherwise unparsable;
//   - a reset is ignored when unparsable, negative ("-1s") or before now (an
//     instant already past, or a clock skewed against the server's); "0s"
//     is now;
//   - a kind with neither a usable limit nor a usable remaining count is
//     absent, whatever its reset says.
//
// Limit and remaining are not checked against each other. Header names are
// matched case-insensitively, a name spelled in lower case winning over
// another spelling of it; only the first value of a header is read. Should
// one response carry both families for a kind (no provider does), the
// Anthropic value wins field by field.
package ratelimit

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Kind is what a rate limit counts.
type Kind uint8

// The kinds of limit, in the order Kinds lists them.
const (
	Requests     Kind = iota // requests per window
	Tokens                   // tokens per window (OpenAI: input and output; Anthropic: the most restrictive token limit)
	InputTokens              // input tokens per window
	OutputTokens             // output tokens per window
	numKinds
)

var kindNames = [numKinds]string{"requests", "tokens", "input_tokens", "output_tokens"}

// String is the kind's name: "requests", "tokens", "input_tokens" or
// "output_tokens" ("Kind(n)" for a value out of range).
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Kinds returns every kind, in order.
func Kinds() []Kind {
	return []Kind{Requests, Tokens, InputTokens, OutputTokens}
}

// Limit is the state of one kind of limit, as one response announced it.
// Limit and Remaining are meaningful only when their Has field is set.
type Limit struct {
	Limit     int64     // the window's capacity, above 0
	Remaining int64     // what remains of the window, 0 or more
	Reset     time.Time // when the window refills; zero when not announced

	HasLimit, HasRemaining bool
}

// Snapshot is the rate-limit state one response announced: at most one
// Limit per Kind. The zero Snapshot holds none.
type Snapshot struct {
	limits [numKinds]Limit
}

// Get returns the limit of kind k, and whether s holds one: a limit whose
// HasLimit or HasRemaining is set.
func (s Snapshot) Get(k Kind) (Limit, bool) {
	if k >= numKinds {
		return Limit{}, false
	}
	l := s.limits[k]
	return l, l.HasLimit || l.HasRemaining
}

// Set stores l as the limit of kind k; a limit with neither HasLimit nor
// HasRemaining removes it, and a kind out of range is ignored. A count
// whose Has field is unset is stored as 0.
func (s *Snapshot) Set(k Kind, l Limit) {
	if k >= numKinds {
		return
	}
	if !l.HasLimit {
		l.Limit = 0
	}
	if !l.HasRemaining {
		l.Remaining = 0
	}
	if !l.HasLimit && !l.HasRemaining {
		l = Limit{}
	}
	s.limits[k] = l
}

// Len is the number of kinds s holds a limit for.
func (s Snapshot) Len() int {
	n := 0
	for k := range numKinds {
		if _, ok := s.Get(k); ok {
			n++
		}
	}
	return n
}

// Parse reads the rate-limit headers of a response from headers (names in
// any case, lower case as the provider adapters give them); now is when
// the response arrived. See the package comment for the rules.
func Parse(headers map[string]string, now time.Time) Snapshot {
	var r raw
	for name, v := range headers {
		r.add(name, v)
	}
	return r.snapshot(now)
}

// ParseHTTP is Parse for the headers of an http.Response.
func ParseHTTP(h http.Header, now time.Time) Snapshot {
	var r raw
	for name, vs := range h {
		if len(vs) > 0 {
			r.add(name, vs[0])
		}
	}
	return r.snapshot(now)
}

// family is a header family: whose names and reset format.
type family uint8

const (
	openAI family = iota
	anthropic
	numFamilies
)

// field is one of the three headers of a kind.
type field uint8

const (
	limitField field = iota
	remainingField
	resetField
	numFields
)

// slot is where a header's value goes.
type slot struct {
	fam   family
	kind  Kind
	field field
}

const (
	openAIPrefix    = "x-ratelimit-"
	anthropicPrefix = "anthropic-ratelimit-"
)

// slots maps every header name read, in lower case, to its slot.
var slots = func() map[string]slot {
	m := map[string]slot{}
	fields := [numFields]string{"limit", "remaining", "reset"}
	for _, k := range []Kind{Requests, Tokens} {
		for f, name := range fields {
			m[openAIPrefix+name+"-"+k.String()] = slot{openAI, k, field(f)}
		}
	}
	for _, k := range Kinds() {
		kind := strings.ReplaceAll(k.String(), "_", "-")
		for f, name := range fields {
			m[anthropicPrefix+kind+"-"+name] = slot{anthropic, k, field(f)}
		}
	}
	return m
}()

// value is one header value found, and whether its name was lower case.
type value struct {
	v          string
	set, lower bool
}

// raw holds the header values found, by slot.
type raw [numFamilies][numKinds][numFields]value

// add takes one header: kept when it names a slot, unless the slot already
// has a value from a name in lower case, or from any name if this one is not.
func (r *raw) add(name, v string) {
	if !hasPrefixFold(name, openAIPrefix) && !hasPrefixFold(name, anthropicPrefix) {
		return // most headers: no allocation for them
	}
	lower := strings.ToLower(name)
	s, ok := slots[lower]
	if !ok {
		return
	}
	dst := &r[s.fam][s.kind][s.field]
	isLower := lower == name
	if dst.set && (dst.lower || !isLower) {
		return
	}
	*dst = value{v: v, set: true, lower: isLower}
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// snapshot reads the values found, each on its own, relative to now.
func (r *raw) snapshot(now time.Time) Snapshot {
	var s Snapshot
	for k := range numKinds {
		var l Limit
		for fam := range numFamilies {
			v := &r[fam][k]
			if n, ok := count(v[limitField]); ok && n > 0 {
				l.Limit, l.HasLimit = n, true
			}
			if n, ok := count(v[remainingField]); ok {
				l.Remaining, l.HasRemaining = n, true
			}
			if t, ok := reset(fam, v[resetField], now); ok {
				l.Reset = t
			}
		}
		s.Set(k, l)
	}
	return s
}

// count reads a limit or a remaining count: a base-10 integer, 0 or more.
func count(v value) (int64, bool) {
	if !v.set {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v.v), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// reset reads a reset in the family's format: the instant it names, if
// that is not before now.
func reset(fam family, v value, now time.Time) (time.Time, bool) {
	if !v.set {
		return time.Time{}, false
	}
	s := strings.TrimSpace(v.v)
	var t time.Time
	switch fam {
	case openAI:
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return time.Time{}, false
		}
		t = now.Add(d)
	case anthropic:
		var err error
		if t, err = time.Parse(time.RFC3339, s); err != nil {
			return time.Time{}, false
		}
	}
	if t.Before(now) {
		return time.Time{}, false
	}
	return t, true
}
