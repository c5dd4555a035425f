package config

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/musepi/musepi"

	"github.com/musepi/musepi/retry"
)

// parseTOML parses data into its tree of tables. A syntax error is one
// problem with the line and column.
func parseTOML(data []byte) (root map[string]any, probs []Problem) {
	defer func() {
		// The parser is fuzzed upstream; this keeps a parser bug from
		// taking down a program that only wanted to read its config.
		if r := recover(); r != nil {
			root, probs = nil, []Problem{{Message: fmt.Sprintf("invalid TOML: %v", r)}}
		}
	}()
	root = map[string]any{}
	if _, err := toml.Decode(string(data), &root); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, []Problem{{Message: fmt.Sprintf("invalid TOML at line %d, column %d: %s",
				pe.Position.Line, pe.Position.Col, pe.Message)}}
		}
		return nil, []Problem{{Message: "invalid TOML: " + strings.TrimPrefix(err.Error(), "toml: ")}}
	}
	return root, nil
}

// decode reads the tree into a Config, ext reading the keys it defines.
// Keys it does not know and values
// of the wrong type are problems; values are not validated here. Settings
// left out keep their defaults.
func decode(root map[string]any, ext Extension) (*Config, []Problem) {
	d := &decoder{}
	c := &Config{ext: ext, Retry: retry.DefaultSettings(), Pacing: true, PacingStickyWait: musepi.DefaultPacingStickyWait,
		StreamIdleTimeout: musepi.DefaultStreamIdleTimeout, PassivateAfter: musepi.DefaultPassivateAfter,
		MaxResponseBytes: musepi.DefaultMaxResponseBytes}
	t := d.table("", root)
	t.Str("default_model", &c.DefaultModel)
	t.Bool("auto_redeem", &c.AutoRedeem)
	t.Bool("pacing", &c.Pacing)
	t.Millis("pacing_sticky_wait_ms", &c.PacingStickyWait)
	t.Str("history_dir", &c.HistoryDir)
	t.Str("history_sync", &c.HistorySync)
	t.Millis("request_timeout_ms", &c.RequestTimeout)
	t.Millis("stream_idle_timeout_ms", &c.StreamIdleTimeout)
	t.Millis("passivate_after_ms", &c.PassivateAfter)
	t.Count("max_response_bytes", &c.MaxResponseBytes)
	if pt, ok := t.Sub("providers"); ok {
		c.Providers = map[string]Provider{}
		for _, name := range pt.Keys() {
			if p, ok := decodeProvider(pt, name); ok {
				c.Providers[name] = p
			}
		}
		pt.Done(nil)
	}
	if rt, ok := t.Sub("retry"); ok {
		decodeRetry(rt, &c.Retry)
	}
	if ot, ok := t.Sub("overload"); ok {
		decodeOverload(ot, &c.Overload)
	}
	if ext != nil {
		ext.Decode(t)
	}
	t.Done(nil)
	return c, d.probs
}

// decodeProvider reads the table name of [providers]; false when it is
// missing or not a table.
func decodeProvider(parent *Table, name string) (Provider, bool) {
	t, ok := parent.Sub(name)
	if !ok {
		return Provider{}, false
	}
	var p Provider
	var kind string
	t.Str("kind", &kind)
	p.Kind = Kind(kind)
	t.Str("base_url", &p.BaseURL)
	t.Strs("models", &p.Models)
	var maxTokens int64
	if t.Integer("max_tokens", &maxTokens) {
		p.MaxTokens = maxTokens
	}
	p.RateLimits = t.rateLimits()
	if pt, ok := t.Sub("prices"); ok {
		p.Prices = decodePrices(pt)
	}
	if creds, ok := t.Tables("credentials"); creds != nil {
		p.Credentials = decodeCredentials(creds)
		if !ok {
			p.Credentials = nil // not validated further: its problems are reported
		}
	}
	t.Done(map[string]string{
		"api_key": "unknown key: API keys are never read from the file; " +
			"add a [[" + t.path + ".credentials]] table whose api_key_env names an environment variable",
	})
	return p, true
}

// decodePrices reads a provider's [prices] table: one table of prices per
// model.
func decodePrices(pt *Table) map[string]Price {
	prices := map[string]Price{}
	for _, model := range pt.Keys() {
		mt, ok := pt.Sub(model)
		if !ok {
			continue
		}
		var pr Price
		mt.Number("input", &pr.Input)
		mt.Number("output", &pr.Output)
		mt.Number("cache_read", &pr.CacheRead)
		mt.Number("cache_write", &pr.CacheWrite)
		mt.Done(nil)
		prices[model] = pr
	}
	pt.Done(nil) // every key was read above
	return prices
}

// decodeCredentials reads a provider's [[credentials]] tables, skipping
// the elements that are not tables.
func decodeCredentials(creds []*Table) []Credential {
	out := make([]Credential, 0, len(creds))
	for _, ct := range creds {
		if ct == nil {
			continue
		}
		var cr Credential
		ct.Str("name", &cr.Name)
		ct.Str("api_key_env", &cr.APIKeyEnv)
		ct.Count("banked_resets", &cr.BankedResets)
		cr.RateLimits = ct.rateLimits()
		ct.Done(map[string]string{
			"api_key": "unknown key: API keys are never read from the file; " +
				"put the key in an environment variable and name it in api_key_env",
		})
		out = append(out, cr)
	}
	return out
}

func decodeRetry(t *Table, s *retry.Settings) {
	t.Bool("enabled", &s.Enabled)
	t.Count("max_retries", &s.MaxRetries)
	t.Millis("base_delay_ms", &s.BaseDelay)
	t.Millis("max_delay_ms", &s.MaxDelay)
	t.Bool("model_fallback", &s.ModelFallback)
	var policy string
	if t.Str("fallback_revert_policy", &policy) {
		s.FallbackRevertPolicy = retry.RevertPolicy(policy)
	}
	if ct, ok := t.Sub("fallback_chains"); ok {
		chains := map[string][]string{}
		for _, role := range ct.Keys() {
			var chain []string
			if ct.Strs(role, &chain) {
				chains[role] = chain
			}
		}
		ct.Done(nil) // every key was read above
		if len(chains) > 0 {
			s.FallbackChains = chains
		}
	}
	if bt, ok := t.Sub("budget"); ok {
		decodeBudget(bt, &s.Budget)
	}
	t.Done(nil)
}

func decodeBudget(t *Table, b *retry.BudgetSettings) {
	t.Bool("enabled", &b.Enabled)
	t.Number("max_tokens", &b.MaxTokens)
	t.Number("token_ratio", &b.TokenRatio)
	t.Millis("probe_interval_ms", &b.ProbeInterval)
	t.Millis("release_window_ms", &b.ReleaseWindow)
	t.Done(nil)
}

func decodeOverload(t *Table, o *Overload) {
	t.Bool("enabled", &o.Enabled)
	t.Count("max", &o.Settings.Max)
	t.Count("initial", &o.Settings.Initial)
	t.Number("backoff", &o.Settings.Backoff)
	t.Number("tolerance", &o.Settings.Tolerance)
	t.Millis("probe_after_ms", &o.Settings.ProbeAfter)
	t.Count("window", &o.Settings.Window)
	t.Millis("max_queue_wait_ms", &o.Settings.MaxQueueWait)
	t.Strs("high_priority_fallback", &o.Settings.HighPriorityFallback)
	t.Done(nil)
}

// decoder collects the problems of one decode.
type decoder struct{ probs []Problem }

func (d *decoder) add(key, format string, args ...any) {
	d.probs = append(d.probs, Problem{Key: key, Message: fmt.Sprintf(format, args...)})
}

func (d *decoder) wrongType(key, want string, v any) {
	d.add(key, "must be %s, got %s", want, tomlType(v))
}

func (d *decoder) table(path string, m map[string]any) *Table {
	return &Table{d: d, path: path, m: m, known: map[string]bool{}}
}

// Table is one TOML table of the file being read, for the decoding of
// its keys (an Extension's among them). Each accessor marks its key as
// known and reads its value when the key is present, reporting a value of
// the wrong type as a problem (and false); Done reports the keys nobody
// asked for.
type Table struct {
	d     *decoder
	path  string
	m     map[string]any
	known map[string]bool
}

// at is the full key of k in this table.
func (t *Table) at(k string) string { return joinKey(t.path, k) }

// Keys returns the table's keys, sorted.
func (t *Table) Keys() []string {
	ks := make([]string, 0, len(t.m))
	for k := range t.m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (t *Table) get(k string) (any, bool) {
	t.known[k] = true
	v, ok := t.m[k]
	return v, ok
}

// Str reads a string; it reports whether one was there.
func (t *Table) Str(k string, dst *string) bool {
	v, ok := t.get(k)
	if !ok {
		return false
	}
	s, ok := v.(string)
	if !ok {
		t.d.wrongType(t.at(k), "a string", v)
		return false
	}
	*dst = s
	return true
}

// Bool reads a boolean.
func (t *Table) Bool(k string, dst *bool) bool {
	v, ok := t.get(k)
	if !ok {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		t.d.wrongType(t.at(k), "a boolean (true or false)", v)
		return false
	}
	*dst = b
	return true
}

// Integer reads an integer.
func (t *Table) Integer(k string, dst *int64) bool {
	v, ok := t.get(k)
	if !ok {
		return false
	}
	n, ok := v.(int64)
	if !ok {
		t.d.wrongType(t.at(k), "an integer", v)
		return false
	}
	*dst = n
	return true
}

// Number reads a number, integer or not, into a float64.
func (t *Table) Number(k string, dst *float64) bool {
	v, ok := t.get(k)
	if !ok {
		return false
	}
	switch n := v.(type) {
	case int64:
		*dst = float64(n)
	case float64:
		*dst = n
	default:
		t.d.wrongType(t.at(k), "a number", v)
		return false
	}
	return true
}

// Count reads an integer into an int.
func (t *Table) Count(k string, dst *int) bool {
	var n int64
	if !t.Integer(k, &n) {
		return false
	}
	if int64(int(n)) != n {
		t.d.add(t.at(k), "%d is out of range", n)
		return false
	}
	*dst = int(n)
	return true
}

// rateLimits reads the per-minute rate limits rpm, tpm, input_tpm and
// output_tpm (0 or more; absent: 0, none).
func (t *Table) rateLimits() musepi.RateLimits {
	var l musepi.RateLimits
	for k, dst := range map[string]*int64{"rpm": &l.RPM, "tpm": &l.TPM, "input_tpm": &l.InputTPM, "output_tpm": &l.OutputTPM} {
		var n int64
		if !t.Integer(k, &n) {
			continue
		}
		if n < 0 {
			t.d.add(t.at(k), "must be 0 or more (a limit per minute; 0: none), got %d", n)
			continue
		}
		*dst = n
	}
	return l
}

// maxMillis is the largest number of milliseconds a time.Duration holds.
const maxMillis = math.MaxInt64 / int64(time.Millisecond)

// Millis reads an integer number of milliseconds into a Duration.
func (t *Table) Millis(k string, dst *time.Duration) bool {
	var n int64
	if !t.Integer(k, &n) {
		return false
	}
	if n > maxMillis || n < -maxMillis {
		t.d.add(t.at(k), "%d is out of range (at most %d ms)", n, maxMillis)
		return false
	}
	*dst = time.Duration(n) * time.Millisecond
	return true
}

// Strs reads an array of strings.
func (t *Table) Strs(k string, dst *[]string) bool {
	v, ok := t.get(k)
	if !ok {
		return false
	}
	arr, ok := v.([]any)
	if !ok {
		t.d.wrongType(t.at(k), "an array of strings", v)
		return false
	}
	out := make([]string, 0, len(arr))
	good := true
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			t.d.wrongType(fmt.Sprintf("%s[%d]", t.at(k), i), "a string", e)
			good = false
			continue
		}
		out = append(out, s)
	}
	if good {
		*dst = out
	}
	return good
}

// Sub reads a table.
func (t *Table) Sub(k string) (*Table, bool) {
	v, ok := t.get(k)
	if !ok {
		return nil, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.d.wrongType(t.at(k), "a table", v)
		return nil, false
	}
	return t.d.table(t.at(k), m), true
}

// Tables reads an array of tables, written either as [[k]] sections or as
// an array of inline tables. When an element is not a table, the others are
// still read (for their own problems) but ok is false.
func (t *Table) Tables(k string) (tables []*Table, ok bool) {
	v, present := t.get(k)
	if !present {
		return nil, false
	}
	var maps []map[string]any
	ok = true
	switch a := v.(type) {
	case []map[string]any:
		maps = a
	case []any:
		maps = make([]map[string]any, len(a))
		for i, e := range a {
			m, isTable := e.(map[string]any)
			if !isTable {
				t.d.wrongType(fmt.Sprintf("%s[%d]", t.at(k), i), "a table", e)
				ok = false
				continue
			}
			maps[i] = m
		}
	default:
		t.d.wrongType(t.at(k), "an array of tables", v)
		return nil, false
	}
	tables = make([]*Table, len(maps))
	for i, m := range maps {
		if m != nil {
			tables[i] = t.d.table(fmt.Sprintf("%s[%d]", t.at(k), i), m)
		}
	}
	return tables, ok
}

// Done reports every key of the table that no accessor asked for. hints
// replaces the message for specific unknown keys.
func (t *Table) Done(hints map[string]string) {
	var allowed []string
	for k := range t.known {
		allowed = append(allowed, k)
	}
	sort.Strings(allowed)
	for _, k := range t.Keys() {
		if t.known[k] {
			continue
		}
		if h, ok := hints[k]; ok {
			t.d.add(t.at(k), "%s", h)
			continue
		}
		if s := suggest(k, allowed); s != "" {
			t.d.add(t.at(k), "unknown key (did you mean %q?)", s)
			continue
		}
		t.d.add(t.at(k), "unknown key (allowed: %s)", strings.Join(allowed, ", "))
	}
}

// suggest returns the allowed key k is probably a misspelling of, or "".
// Keys are compared ignoring case, '_' and '-' (so maxRetries and
// MAX-RETRIES both suggest max_retries); a prefix of a key ("banked" for
// banked_resets) or a key one or two edits away also counts.
func suggest(k string, allowed []string) string {
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
	}
	nk := norm(k)
	best, bestDist := "", 3
	for _, a := range allowed {
		na := norm(a)
		switch {
		case na == nk:
			return a
		case len(nk) >= 4 && strings.HasPrefix(na, nk):
			best, bestDist = a, 0
		default:
			if d := editDistance(na, nk, bestDist); d < bestDist {
				best, bestDist = a, d
			}
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, or limit when it is
// limit or more.
func editDistance(a, b string, limit int) int {
	if len(a)-len(b) >= limit || len(b)-len(a) >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}

// tomlType names the TOML type of a decoded value.
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case time.Time:
		return "a date-time"
	case []any:
		return "an array"
	case []map[string]any:
		return "an array of tables"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("%T", v)
}

// joinKey appends one key segment to a dotted key path, quoting the
// segment the way TOML would when it is not a bare key.
func joinKey(path, seg string) string {
	q := toml.Key{seg}.String()
	if path == "" {
		return q
	}
	return path + "." + q
}
