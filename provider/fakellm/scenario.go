package fakellm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The API names a rule can match on.
const (
	APIOpenAIChat      = "openai-chat"
	APIOpenAIResponses = "openai-responses"
	APIAnthropic       = "anthropic"
)

// DefaultText is what a stream says when neither the rule nor the
// scenario's default gives any content.
const DefaultText = "Hello from fakellm"

// Scenario is a fault-injection script: rules tried in order, the first
// matching rule answers, otherwise Default does. A nil or empty Default
// streams DefaultText. Capacity is how many calls each model takes at
// once, and Limits are rate limits: the answers that would succeed must
// fit in both. A Scenario is read-only once handed to a Server.
type Scenario struct {
	Rules    []Rule     `json:"rules,omitempty"`
	Default  *Respond   `json:"default,omitempty"`
	Limits   []Limit    `json:"limits,omitempty"`
	Capacity []Capacity `json:"capacity,omitempty"`
}

// Rule is one scripted answer for the requests it matches.
type Rule struct {
	// Name labels the rule in Stats.ByRule; without a name the rule is
	// counted as "rules[<index>]".
	Name    string  `json:"name,omitempty"`
	Match   Match   `json:"match"`
	Respond Respond `json:"respond"`
}

// Match selects requests. Every field is optional; the zero Match matches
// every request.
type Match struct {
	API   string `json:"api,omitempty"`   // APIOpenAIChat, APIOpenAIResponses or APIAnthropic
	Key   string `json:"key,omitempty"`   // the API key, exactly
	Model string `json:"model,omitempty"` // the request's "model", exactly
	// FromMs and ToMs bound a window in ms since the server started (or
	// since Server.ResetClock): FromMs <= t < ToMs. ToMs 0 means no end.
	FromMs int64 `json:"from_ms,omitempty"`
	ToMs   int64 `json:"to_ms,omitempty"`
	// First limits the rule to its first N matching requests (those that
	// match every other field); later ones fall through to the next rules.
	// 0 means unlimited.
	First int `json:"first,omitempty"`
}

// ToolCall is a function call the fake model makes.
type ToolCall struct {
	Name string `json:"name"`
	// Arguments is the JSON text of the arguments object ("{}" when empty).
	// In a scenario file it may be written as a JSON object or as a string;
	// a string is sent verbatim, even if it is not valid JSON.
	Arguments string `json:"arguments,omitempty"`
}

// Respond says how to answer. It is exactly one of three kinds:
//
//   - an HTTP error: Preset and/or Status, ErrorType, ErrorCode, Message;
//   - an in-stream error: StreamError (with optional Preset, ErrorType,
//     ErrorCode, Message);
//   - a stream (the default kind): Text, Thinking, ToolCall, Refusal, Stop,
//     Chunks, CutAfter, StallMs, StallAfter, ChunkDelayMs.
//
// Headers and DelayMs go with any kind; ForgetPrevious with a stream.
type Respond struct {
	// HTTP error.
	Preset    string `json:"preset,omitempty"`
	Status    int    `json:"status,omitempty"`
	ErrorType string `json:"error_type,omitempty"`
	ErrorCode string `json:"error_code,omitempty"` // OpenAI's "code"; ignored for Anthropic
	Message   string `json:"message,omitempty"`

	// In-stream error: HTTP 200, then one error event and the end of the
	// body. Anthropic: `event: error` before message_start. OpenAI chat:
	// a `data: {"error":{...}}` chunk. OpenAI Responses: an `error` event.
	StreamError bool `json:"stream_error,omitempty"`

	// Any kind.
	Headers map[string]string `json:"headers,omitempty"`
	DelayMs int               `json:"delay_ms,omitempty"`

	// Responses API: forget the request's previous_response_id and answer
	// the stale-replay error (400 previous_response_not_found). Requests
	// without a previous_response_id get the stream.
	ForgetPrevious bool `json:"forget_previous,omitempty"`

	// Stream.
	Text     string    `json:"text,omitempty"`
	Chunks   int       `json:"chunks,omitempty"` // pieces per block; 0 means 3
	Thinking string    `json:"thinking,omitempty"`
	ToolCall *ToolCall `json:"tool_call,omitempty"`
	Refusal  string    `json:"refusal,omitempty"`
	Stop     string    `json:"stop,omitempty"`
	// ReasoningField is the Chat Completions delta field thinking streams
	// in: "reasoning_content" (DeepSeek, vLLM; the default) or "reasoning"
	// (OpenRouter).
	ReasoningField string `json:"reasoning_field,omitempty"`
	// StopDetails (with a refusal stop) are the refusal's structured stop
	// details, {"type": "refusal", "category": ..., "explanation": ...}.
	// Chat Completions sends them all on the content_filter finish choice,
	// as some gateways do; Anthropic sends the Messages API's refusal
	// stop_details (its category and explanation); Responses has no place
	// for them.
	StopDetails map[string]string `json:"stop_details,omitempty"`
	// StopError (with a refusal stop) is the provider's error text of the
	// refusal. Chat Completions sends it in an "error" object on the
	// content_filter finish chunk (beside the choices when not streaming);
	// the Messages and Responses APIs have no place for it.
	StopError string `json:"stop_error,omitempty"`
	// CutAfter drops the TCP connection after that many content chunks,
	// without the terminating events (nil: never; 0: right after the
	// response headers).
	CutAfter *int `json:"cut_after,omitempty"`
	// StallMs pauses the stream for that long after the headers and
	// StallAfter content chunks.
	StallMs    int `json:"stall_ms,omitempty"`
	StallAfter int `json:"stall_after,omitempty"`
	// ChunkDelayMs waits between content chunks.
	ChunkDelayMs int `json:"chunk_delay_ms,omitempty"`
}

// Int returns a pointer to n, for Respond.CutAfter.
func Int(n int) *int { return &n }

// kind is what a Respond answers with.
type kind int

const (
	kindStream kind = iota
	kindError
	kindStreamError
)

func (r *Respond) kind() kind {
	switch {
	case r.StreamError:
		return kindStreamError
	case len(r.errorFields()) > 0:
		return kindError
	default:
		return kindStream
	}
}

// errorFields names the HTTP-error fields that are set.
func (r *Respond) errorFields() []string {
	var f []string
	if r.Preset != "" {
		f = append(f, "preset")
	}
	if r.Status != 0 {
		f = append(f, "status")
	}
	if r.ErrorType != "" {
		f = append(f, "error_type")
	}
	if r.ErrorCode != "" {
		f = append(f, "error_code")
	}
	if r.Message != "" {
		f = append(f, "message")
	}
	return f
}

// streamFields names the stream fields that are set.
func (r *Respond) streamFields() []string {
	var f []string
	add := func(set bool, name string) {
		if set {
			f = append(f, name)
		}
	}
	add(r.Text != "", "text")
	add(r.Chunks != 0, "chunks")
	add(r.Thinking != "", "thinking")
	add(r.ToolCall != nil, "tool_call")
	add(r.Refusal != "", "refusal")
	add(r.Stop != "", "stop")
	add(r.ReasoningField != "", "reasoning_field")
	add(r.StopDetails != nil, "stop_details")
	add(r.StopError != "", "stop_error")
	add(r.CutAfter != nil, "cut_after")
	add(r.StallMs != 0, "stall_ms")
	add(r.StallAfter != 0, "stall_after")
	add(r.ChunkDelayMs != 0, "chunk_delay_ms")
	return f
}

// hasContent reports whether a stream Respond says anything itself.
func (r *Respond) hasContent() bool {
	return r.Text != "" || r.Thinking != "" || r.ToolCall != nil || r.Refusal != ""
}

// ScenarioError is a validation failure naming the offending field, such
// as "rules[1].respond.status".
type ScenarioError struct {
	Path string
	Msg  string
}

func (e *ScenarioError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

func errAt(path, format string, args ...any) error {
	return &ScenarioError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// LoadScenario reads and validates a scenario file. Errors start with the
// file name and name the offending field.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sc, err := ParseScenario(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sc, nil
}

// ParseScenario decodes and validates a scenario. Unknown fields, wrong
// types and invalid values are errors naming the field path, such as
// `rules[1].respond.status: must be 100-599, got 700`.
func ParseScenario(data []byte) (*Scenario, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errAt("", "empty scenario (want a JSON object)")
	}
	if err := checkSyntax(data); err != nil {
		return nil, err
	}
	sc, err := decodeScenario(data)
	if err != nil {
		return nil, err
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	// A last strict decode of the whole document, so nothing the walker
	// skipped can slip through.
	if err := strictDecode(data); err != nil {
		return nil, err
	}
	return sc, nil
}

// checkSyntax reports a JSON syntax error with its line and column.
func checkSyntax(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var v any
	err := dec.Decode(&v)
	if err == nil {
		if _, terr := dec.Token(); terr == nil {
			off := dec.InputOffset()
			line, col := lineCol(data, off)
			return errAt("", "invalid JSON at line %d, column %d: data after the top-level value", line, col)
		}
		return nil
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// Offset counts the offending byte itself.
		line, col := lineCol(data, max(se.Offset-1, 0))
		return errAt("", "invalid JSON at line %d, column %d: %v", line, col, se)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errAt("", "invalid JSON: unexpected end of input")
	}
	return errAt("", "invalid JSON: %v", err)
}

func lineCol(data []byte, off int64) (int, int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	line, col := 1, 1
	for _, b := range data[:off] {
		if b == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

// strictDecode decodes data into the Go types with unknown fields
// disallowed. tool_call.arguments may legitimately be an object in a file,
// so the arguments are normalised to strings first.
func strictDecode(data []byte) error {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return errAt("", "%v", err)
	}
	fix := func(resp any) {
		m, ok := resp.(map[string]any)
		if !ok {
			return
		}
		tc, ok := m["tool_call"].(map[string]any)
		if !ok {
			return
		}
		if a, ok := tc["arguments"]; ok {
			if _, isString := a.(string); !isString {
				b, _ := json.Marshal(a)
				tc["arguments"] = string(b)
			}
		}
	}
	if rules, ok := doc["rules"].([]any); ok {
		for _, r := range rules {
			if rm, ok := r.(map[string]any); ok {
				fix(rm["respond"])
			}
		}
	}
	fix(doc["default"])
	norm, err := json.Marshal(doc)
	if err != nil {
		return errAt("", "%v", err)
	}
	d := json.NewDecoder(bytes.NewReader(norm))
	d.DisallowUnknownFields()
	var sc Scenario
	if err := d.Decode(&sc); err != nil {
		return errAt("", "%v", err)
	}
	return nil
}

// object is a JSON object being read field by field under a path.
type object struct {
	path   string
	fields map[string]json.RawMessage
}

func pathJoin(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// readObject decodes raw as an object whose keys must all be allowed.
func readObject(path string, raw json.RawMessage, allowed ...string) (*object, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errAt(path, "must be an object, got %s", describeJSON(raw))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, errAt(path, "%v", err)
	}
	var unknown []string
	for k := range m {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, errAt(pathJoin(path, unknown[0]), "unknown field (allowed: %s)", strings.Join(allowed, ", "))
	}
	return &object{path: path, fields: m}, nil
}

func describeJSON(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string " + string(truncate(raw, 40))
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "the number " + string(truncate(raw, 40))
	}
}

func truncate(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	return append(slices.Clip(b[:n]), "..."...)
}

func (o *object) has(name string) bool {
	_, ok := o.fields[name]
	return ok
}

func (o *object) str(name string, dst *string) error {
	raw, ok := o.fields[name]
	if !ok {
		return nil
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return errAt(pathJoin(o.path, name), "must be a string, got %s", describeJSON(raw))
	}
	return json.Unmarshal(raw, dst)
}

func (o *object) boolean(name string, dst *bool) error {
	raw, ok := o.fields[name]
	if !ok {
		return nil
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || (raw[0] != 't' && raw[0] != 'f') {
		return errAt(pathJoin(o.path, name), "must be true or false, got %s", describeJSON(raw))
	}
	return json.Unmarshal(raw, dst)
}

func (o *object) integer(name string, dst *int64) error {
	raw, ok := o.fields[name]
	if !ok {
		return nil
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
		return errAt(pathJoin(o.path, name), "must be an integer, got %s", describeJSON(raw))
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return errAt(pathJoin(o.path, name), "must be an integer, got %s", raw)
	}
	*dst = n
	return nil
}

// number reads a JSON number.
func (o *object) number(name string, dst *float64) error {
	raw, ok := o.fields[name]
	if !ok {
		return nil
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
		return errAt(pathJoin(o.path, name), "must be a number, got %s", describeJSON(raw))
	}
	return json.Unmarshal(raw, dst)
}

// intField reads an int that must fit in 32 bits (limits are in ms or
// counts, far below that).
func (o *object) intField(name string, dst *int) error {
	var n int64
	if err := o.integer(name, &n); err != nil {
		return err
	}
	if n > 1<<31-1 || n < -(1<<31) {
		return errAt(pathJoin(o.path, name), "out of range: %d", n)
	}
	*dst = int(n)
	return nil
}

func (o *object) stringMap(name string, dst *map[string]string) error {
	raw, ok := o.fields[name]
	if !ok {
		return nil
	}
	path := pathJoin(o.path, name)
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return errAt(path, "must be an object of strings, got %s", describeJSON(raw))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return errAt(path, "%v", err)
	}
	out := make(map[string]string, len(m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := bytes.TrimSpace(m[k])
		if len(v) == 0 || v[0] != '"' {
			return errAt(path+"."+k, "must be a string, got %s (write numbers in quotes)", describeJSON(v))
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return errAt(path+"."+k, "%v", err)
		}
		out[k] = s
	}
	*dst = out
	return nil
}

func decodeScenario(data []byte) (*Scenario, error) {
	top, err := readObject("", data, "rules", "default", "limits", "capacity")
	if err != nil {
		var se *ScenarioError
		if errors.As(err, &se) && se.Path == "" {
			se.Msg = "scenario " + se.Msg
		}
		return nil, err
	}
	sc := &Scenario{}
	if raw, ok := top.fields["rules"]; ok {
		items, err := readArray("rules", raw)
		if err != nil {
			return nil, err
		}
		for i, item := range items {
			r, err := decodeRule(fmt.Sprintf("rules[%d]", i), item)
			if err != nil {
				return nil, err
			}
			sc.Rules = append(sc.Rules, r)
		}
	}
	if raw, ok := top.fields["default"]; ok {
		d, err := decodeRespond("default", raw)
		if err != nil {
			return nil, err
		}
		sc.Default = d
	}
	if raw, ok := top.fields["limits"]; ok {
		if sc.Limits, err = decodeLimits(raw); err != nil {
			return nil, err
		}
	}
	if raw, ok := top.fields["capacity"]; ok {
		if sc.Capacity, err = decodeCapacity(raw); err != nil {
			return nil, err
		}
	}
	return sc, nil
}

// decodeLimits reads the limits array.
func decodeLimits(raw json.RawMessage) ([]Limit, error) {
	items, err := readArray("limits", raw)
	if err != nil {
		return nil, err
	}
	out := make([]Limit, 0, len(items))
	for i, item := range items {
		o, err := readObject(fmt.Sprintf("limits[%d]", i), item, "key", "model", "rpm", "tpm", "itpm", "otpm", "window_ms")
		if err != nil {
			return nil, err
		}
		var l Limit
		for _, e := range []error{o.str("key", &l.Key), o.str("model", &l.Model), o.integer("rpm", &l.RPM), o.integer("tpm", &l.TPM),
			o.integer("itpm", &l.ITPM), o.integer("otpm", &l.OTPM), o.integer("window_ms", &l.WindowMs)} {
			if e != nil {
				return nil, e
			}
		}
		out = append(out, l)
	}
	return out, nil
}

func decodeRule(path string, raw json.RawMessage) (Rule, error) {
	var r Rule
	o, err := readObject(path, raw, "name", "match", "respond")
	if err != nil {
		return r, err
	}
	if err := o.str("name", &r.Name); err != nil {
		return r, err
	}
	if m, ok := o.fields["match"]; ok {
		mo, err := readObject(path+".match", m, "api", "key", "model", "from_ms", "to_ms", "first")
		if err != nil {
			return r, err
		}
		for _, e := range []error{
			mo.str("api", &r.Match.API),
			mo.str("key", &r.Match.Key),
			mo.str("model", &r.Match.Model),
			mo.integer("from_ms", &r.Match.FromMs),
			mo.integer("to_ms", &r.Match.ToMs),
			mo.intField("first", &r.Match.First),
		} {
			if e != nil {
				return r, e
			}
		}
	}
	rawResp, ok := o.fields["respond"]
	if !ok {
		return r, errAt(path+".respond", "missing (every rule needs a respond object)")
	}
	resp, err := decodeRespond(path+".respond", rawResp)
	if err != nil {
		return r, err
	}
	r.Respond = *resp
	return r, nil
}

var respondFields = []string{
	"preset", "status", "error_type", "error_code", "message", "stream_error",
	"headers", "delay_ms", "forget_previous",
	"text", "chunks", "thinking", "tool_call", "refusal", "stop",
	"reasoning_field", "stop_details", "stop_error", "cut_after", "stall_ms", "stall_after", "chunk_delay_ms",
}

// decodeRespond reads the respond object at path.
func decodeRespond(path string, raw json.RawMessage) (*Respond, error) {
	o, err := readObject(path, raw, respondFields...)
	if err != nil {
		return nil, err
	}
	r := &Respond{}
	for _, e := range []error{
		o.str("preset", &r.Preset),
		o.intField("status", &r.Status),
		o.str("error_type", &r.ErrorType),
		o.str("error_code", &r.ErrorCode),
		o.str("message", &r.Message),
		o.boolean("stream_error", &r.StreamError),
		o.stringMap("headers", &r.Headers),
		o.intField("delay_ms", &r.DelayMs),
		o.boolean("forget_previous", &r.ForgetPrevious),
		o.str("text", &r.Text),
		o.intField("chunks", &r.Chunks),
		o.str("thinking", &r.Thinking),
		o.str("refusal", &r.Refusal),
		o.str("stop", &r.Stop),
		o.str("reasoning_field", &r.ReasoningField),
		o.stringMap("stop_details", &r.StopDetails),
		o.str("stop_error", &r.StopError),
		o.intField("stall_ms", &r.StallMs),
		o.intField("stall_after", &r.StallAfter),
		o.intField("chunk_delay_ms", &r.ChunkDelayMs),
		o.optionalInt("cut_after", &r.CutAfter),
	} {
		if e != nil {
			return nil, e
		}
	}
	if tc, ok := o.fields["tool_call"]; ok {
		if r.ToolCall, err = decodeToolCall(path+".tool_call", tc); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// optionalInt reads an int that may be left out: dst stays nil when the
// field is absent and points to the value otherwise.
func (o *object) optionalInt(name string, dst **int) error {
	if !o.has(name) {
		return nil
	}
	var n int
	if err := o.intField(name, &n); err != nil {
		return err
	}
	*dst = &n
	return nil
}

// decodeToolCall reads the tool_call object at path.
func decodeToolCall(path string, raw json.RawMessage) (*ToolCall, error) {
	o, err := readObject(path, raw, "name", "arguments")
	if err != nil {
		return nil, err
	}
	tc := &ToolCall{}
	if err := o.str("name", &tc.Name); err != nil {
		return nil, err
	}
	if a, ok := o.fields["arguments"]; ok {
		if tc.Arguments, err = decodeArguments(path+".arguments", a); err != nil {
			return nil, err
		}
	}
	return tc, nil
}

// decodeArguments reads tool_call.arguments at path: a string is taken
// verbatim, an object becomes its compact JSON text.
func decodeArguments(path string, raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) > 0 && raw[0] == '"':
		var args string
		if err := json.Unmarshal(raw, &args); err != nil {
			return "", errAt(path, "%v", err)
		}
		return args, nil
	case len(raw) > 0 && raw[0] == '{':
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return "", errAt(path, "%v", err)
		}
		return buf.String(), nil
	default:
		return "", errAt(path, "must be an object or a string holding one, got %s", describeJSON(raw))
	}
}

// Validate checks a scenario built in Go the same way ParseScenario checks
// a file.
func (sc *Scenario) Validate() error {
	if sc == nil {
		return nil
	}
	names := map[string]int{}
	for i := range sc.Rules {
		r := &sc.Rules[i]
		path := fmt.Sprintf("rules[%d]", i)
		if r.Name != "" {
			if r.Name == "default" || strings.HasPrefix(r.Name, "(") {
				return errAt(path+".name", "%q is reserved", r.Name)
			}
			if j, dup := names[r.Name]; dup {
				return errAt(path+".name", "duplicate of rules[%d].name %q", j, r.Name)
			}
			names[r.Name] = i
		}
		if err := r.Match.validate(path + ".match"); err != nil {
			return err
		}
		if err := r.Respond.validate(path + ".respond"); err != nil {
			return err
		}
	}
	if sc.Default != nil {
		if err := sc.Default.validate("default"); err != nil {
			return err
		}
	}
	if err := validateLimits(sc.Limits); err != nil {
		return err
	}
	return validateCapacity(sc.Capacity)
}

var apiNames = []string{APIOpenAIChat, APIOpenAIResponses, APIAnthropic}

func (m *Match) validate(path string) error {
	if m.API != "" && !slices.Contains(apiNames, m.API) {
		return errAt(path+".api", "unknown api %q (want %s)", m.API, strings.Join(apiNames, ", "))
	}
	if m.FromMs < 0 {
		return errAt(path+".from_ms", "must not be negative, got %d", m.FromMs)
	}
	if m.ToMs < 0 {
		return errAt(path+".to_ms", "must not be negative, got %d", m.ToMs)
	}
	if m.ToMs != 0 && m.ToMs <= m.FromMs {
		return errAt(path+".to_ms", "must be greater than from_ms (%d), got %d", m.FromMs, m.ToMs)
	}
	if m.First < 0 {
		return errAt(path+".first", "must not be negative, got %d", m.First)
	}
	return nil
}

// stopNames maps every accepted "stop" spelling to its canonical form.
var stopNames = map[string]string{
	"stop": stopEnd, "end_turn": stopEnd,
	"length": stopLength, "max_tokens": stopLength,
	"tool_calls": stopTool, "tool_use": stopTool,
	"content_filter": stopRefusal, "refusal": stopRefusal,
}

const (
	stopEnd     = "stop"
	stopLength  = "length"
	stopTool    = "tool_use"
	stopRefusal = "refusal"
)

const maxChunks = 10000

// validate checks the respond at path: its numbers and headers, then how
// its fields combine.
func (r *Respond) validate(path string) error {
	if err := r.validateValues(path); err != nil {
		return err
	}
	return r.validateCombination(path)
}

// validateValues checks each field of the respond on its own.
func (r *Respond) validateValues(path string) error {
	nonNeg := []struct {
		name string
		v    int
	}{
		{"status", r.Status}, {"delay_ms", r.DelayMs}, {"chunks", r.Chunks},
		{"stall_ms", r.StallMs}, {"stall_after", r.StallAfter}, {"chunk_delay_ms", r.ChunkDelayMs},
	}
	for _, f := range nonNeg {
		if f.v < 0 {
			return errAt(path+"."+f.name, "must not be negative, got %d", f.v)
		}
	}
	if r.CutAfter != nil && *r.CutAfter < 0 {
		return errAt(path+".cut_after", "must not be negative, got %d", *r.CutAfter)
	}
	if r.Status != 0 && (r.Status < 100 || r.Status > 599) {
		return errAt(path+".status", "must be 100-599, got %d", r.Status)
	}
	if r.Preset != "" {
		if _, ok := presets[r.Preset]; !ok {
			return errAt(path+".preset", "unknown preset %q (want %s)", r.Preset, strings.Join(presetNames(), ", "))
		}
	}
	if r.Chunks > maxChunks {
		return errAt(path+".chunks", "must be at most %d, got %d", maxChunks, r.Chunks)
	}
	if err := r.validateHeaders(path); err != nil {
		return err
	}
	if err := r.validateStop(path); err != nil {
		return err
	}
	switch r.ReasoningField {
	case "", "reasoning_content", "reasoning":
	default:
		return errAt(path+".reasoning_field", "must be reasoning_content or reasoning, got %q", r.ReasoningField)
	}
	if r.ToolCall != nil && r.ToolCall.Name == "" {
		return errAt(path+".tool_call.name", "required")
	}
	return nil
}

// validateHeaders checks that each header has a valid name and a value
// without CR, LF or NUL.
func (r *Respond) validateHeaders(path string) error {
	for name, v := range r.Headers {
		if !validHeaderName(name) {
			return errAt(path+".headers", "invalid header name %q", name)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return errAt(path+".headers."+name, "value must not contain CR, LF or NUL")
		}
	}
	return nil
}

// validateStop checks that the stop, when set, is one of stopNames.
func (r *Respond) validateStop(path string) error {
	if r.Stop == "" {
		return nil
	}
	if _, ok := stopNames[r.Stop]; !ok {
		return errAt(path+".stop", "unknown stop %q (want %s)", r.Stop, strings.Join(stopSpellings(), ", "))
	}
	return nil
}

// stopSpellings are the accepted "stop" values, sorted.
func stopSpellings() []string {
	names := make([]string, 0, len(stopNames))
	for k := range stopNames {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// validateCombination checks the fields of the respond against each
// other: an error or a stream, a refusal and what goes with it.
func (r *Respond) validateCombination(path string) error {
	ef, sf := r.errorFields(), r.streamFields()
	switch {
	case r.StreamError && len(sf) > 0:
		return errAt(path+"."+sf[0], "cannot be combined with stream_error (an in-stream error has no content)")
	case len(ef) > 0 && len(sf) > 0:
		return errAt(path+"."+sf[0], "stream field cannot be combined with error field %q (a respond is an error or a stream, not both)", ef[0])
	case r.ForgetPrevious && r.StreamError:
		return errAt(path+".forget_previous", "cannot be combined with stream_error")
	case r.ForgetPrevious && len(ef) > 0:
		return errAt(path+".forget_previous", "cannot be combined with error field %q (forget_previous answers its own stale-response error)", ef[0])
	}
	if r.Refusal != "" && (r.Text != "" || r.ToolCall != nil) {
		other := "text"
		if r.Text == "" {
			other = "tool_call"
		}
		return errAt(path+".refusal", "cannot be combined with %s (for a refusal after some text, use text with \"stop\": \"refusal\")", other)
	}
	if r.Refusal != "" && r.Stop != "" && stopNames[r.Stop] != stopRefusal {
		return errAt(path+".stop", "must be refusal (or content_filter) with refusal, got %q", r.Stop)
	}
	refusing := r.Refusal != "" || (r.Stop != "" && stopNames[r.Stop] == stopRefusal)
	if (r.StopDetails != nil || r.StopError != "") && !refusing {
		field := "stop_details"
		if r.StopDetails == nil {
			field = "stop_error"
		}
		return errAt(path+"."+field, "needs a refusal (refusal, or stop content_filter)")
	}
	if r.StallAfter > 0 && r.StallMs == 0 {
		return errAt(path+".stall_after", "needs stall_ms")
	}
	return nil
}

func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", c):
		default:
			return false
		}
	}
	return true
}
