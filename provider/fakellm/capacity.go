package fakellm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

// Capacity: per model, at most so many calls in flight; a call beyond it
// gets the provider's overload answer, and the calls it takes slow down
// as it fills. Overload is not a rate limit: it is the provider's, for
// every key at once, and it announces nothing in advance.
//
// Anthropic's errors page (https://platform.claude.com/docs/en/api/errors):
// "529 - overloaded_error: The API is temporarily overloaded", "529
// errors can occur when the API experiences high traffic across all
// users", and "When receiving a streaming response via SSE, it's possible
// that an error can occur after returning a 200 response". Its streaming
// page (https://platform.claude.com/docs/en/build-with-claude/streaming,
// "Error events"): "during periods of high usage, you may receive an
// overloaded_error, which would normally correspond to an HTTP 529 in a
// non-streaming context", with the event
//
//	event: error
//	data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
//
// OpenAI's error codes guide
// (https://platform.openai.com/docs/guides/error-codes): "503 - The engine
// is currently overloaded, please try again later. Cause: Our servers are
// experiencing high traffic"; its Python library words a 503 "The server
// is overloaded or not ready yet.", which is what fakellm's "overloaded"
// preset sends.

// Capacity is how many calls a model takes at once. A Capacity that
// matches no model's requests does nothing; a request that fits goes on
// to the rate limits (Limit).
type Capacity struct {
	// Model selects the model ("" matches any, each model with its own
	// calls in flight); the first matching Capacity of Scenario.Capacity
	// applies.
	Model string `json:"model,omitempty"`
	// InFlight is how many calls the model takes at once (0: none, the
	// model is down), until the first of Changes.
	InFlight int `json:"in_flight"`
	// Changes set InFlight from a time on, in order.
	Changes []CapacityChange `json:"changes,omitempty"`
	// LatencyMs is how long an answer takes to start (its time to first
	// token, waited before the status line) with no other call in flight:
	// with n calls in flight (itself included) of a capacity c, it waits
	// LatencyMs × (1 + n/c), twice as long when full.
	LatencyMs int `json:"latency_ms,omitempty"`
	// ChunkMs is the pause between a stream's content chunks with no other
	// call in flight, grown by the same factor (on top of a respond's
	// chunk_delay_ms).
	ChunkMs int `json:"chunk_ms,omitempty"`
	// StreamErrorShare is the share (0 to 1) of the overload answers to
	// streaming requests that come as a stream that fails: HTTP 200, the
	// stream's opening events, then the API's in-stream error. Spread
	// evenly: with 0.25, every fourth one.
	StreamErrorShare float64 `json:"stream_error_share,omitempty"`
}

// CapacityChange sets a Capacity's InFlight from FromMs on (ms since the
// server started or since ResetClock, as Match.FromMs).
type CapacityChange struct {
	FromMs   int64 `json:"from_ms"`
	InFlight int   `json:"in_flight"`
}

// MaxCapacity bounds Capacity.InFlight.
const MaxCapacity = 1_000_000

// maxLatencyMs bounds Capacity.LatencyMs and ChunkMs: ten minutes.
const maxLatencyMs = 600_000

// labelOverloaded is the stats' rule label of the capacity's overload
// answers.
const labelOverloaded = "(overloaded)"

// at is the capacity elapsed ms into the run.
func (c *Capacity) at(elapsed int64) int {
	n := c.InFlight
	for _, ch := range c.Changes {
		if elapsed < ch.FromMs {
			break
		}
		n = ch.InFlight
	}
	return n
}

// capacityFor is the first capacity that applies to model, or nil.
func (sc *Scenario) capacityFor(model string) *Capacity {
	for i := range sc.Capacity {
		if c := &sc.Capacity[i]; c.Model == "" || c.Model == model {
			return c
		}
	}
	return nil
}

// validateCapacity checks the capacities: numbers in range, changes in
// order, none shadowed by an earlier one.
func validateCapacity(caps []Capacity) error {
	for i := range caps {
		c := &caps[i]
		path := fmt.Sprintf("capacity[%d]", i)
		if c.InFlight < 0 || c.InFlight > MaxCapacity {
			return errAt(path+".in_flight", "must be 0-%d, got %d", MaxCapacity, c.InFlight)
		}
		for _, f := range []struct {
			name string
			v    int
		}{{"latency_ms", c.LatencyMs}, {"chunk_ms", c.ChunkMs}} {
			if f.v < 0 || f.v > maxLatencyMs {
				return errAt(path+"."+f.name, "must be 0-%d, got %d", maxLatencyMs, f.v)
			}
		}
		if !(c.StreamErrorShare >= 0 && c.StreamErrorShare <= 1) {
			return errAt(path+".stream_error_share", "must be 0-1, got %v", c.StreamErrorShare)
		}
		if err := validateChanges(path, c.Changes); err != nil {
			return err
		}
		for j := range caps[:i] {
			if caps[j].Model == "" || caps[j].Model == c.Model {
				return errAt(path, "never applies: capacity[%d] (model %q) matches every request it matches (list the more specific capacity first)",
					j, caps[j].Model)
			}
		}
	}
	return nil
}

// validateChanges checks a capacity's changes: in range, each later than
// the one before.
func validateChanges(path string, changes []CapacityChange) error {
	last := int64(0)
	for k, ch := range changes {
		at := fmt.Sprintf("%s.changes[%d]", path, k)
		if ch.FromMs <= last {
			return errAt(at+".from_ms", "must be greater than %d (after the change before), got %d", last, ch.FromMs)
		}
		if ch.InFlight < 0 || ch.InFlight > MaxCapacity {
			return errAt(at+".in_flight", "must be 0-%d, got %d", MaxCapacity, ch.InFlight)
		}
		last = ch.FromMs
	}
	return nil
}

// decodeCapacity reads the capacity array.
func decodeCapacity(raw json.RawMessage) ([]Capacity, error) {
	items, err := readArray("capacity", raw)
	if err != nil {
		return nil, err
	}
	out := make([]Capacity, 0, len(items))
	for i, item := range items {
		path := fmt.Sprintf("capacity[%d]", i)
		o, err := readObject(path, item, "model", "in_flight", "changes", "latency_ms", "chunk_ms", "stream_error_share")
		if err != nil {
			return nil, err
		}
		if !o.has("in_flight") {
			return nil, errAt(path+".in_flight", "missing (the calls the model takes at once)")
		}
		var c Capacity
		for _, e := range []error{o.str("model", &c.Model), o.intField("in_flight", &c.InFlight),
			o.intField("latency_ms", &c.LatencyMs), o.intField("chunk_ms", &c.ChunkMs), o.number("stream_error_share", &c.StreamErrorShare)} {
			if e != nil {
				return nil, e
			}
		}
		if raw, ok := o.fields["changes"]; ok {
			if c.Changes, err = decodeChanges(path+".changes", raw); err != nil {
				return nil, err
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// decodeChanges reads a capacity's changes at path.
func decodeChanges(path string, raw json.RawMessage) ([]CapacityChange, error) {
	items, err := readArray(path, raw)
	if err != nil {
		return nil, err
	}
	out := make([]CapacityChange, 0, len(items))
	for k, item := range items {
		at := fmt.Sprintf("%s[%d]", path, k)
		o, err := readObject(at, item, "from_ms", "in_flight")
		if err != nil {
			return nil, err
		}
		for _, name := range []string{"from_ms", "in_flight"} {
			if !o.has(name) {
				return nil, errAt(at+"."+name, "missing")
			}
		}
		var ch CapacityChange
		if err := o.integer("from_ms", &ch.FromMs); err != nil {
			return nil, err
		}
		if err := o.intField("in_flight", &ch.InFlight); err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// readArray decodes raw, at path, as an array.
func readArray(path string, raw json.RawMessage) ([]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, errAt(path, "must be an array, got %s", describeJSON(raw))
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errAt(path, "%v", err)
	}
	return items, nil
}

// loadState is a model's calls in flight and its overload answers to
// streaming requests so far (which of them fail inside a stream).
type loadState struct {
	inFlight       int
	streamRefusals int
}

// load is what the capacity decided for one request.
type load struct {
	model string // whose place it holds ("": none)
	// refused says the model is full: overload answer, inside a stream
	// when midStream.
	refused, midStream bool
	// factor is how much slower than at no load the answer goes.
	factor float64
	c      *Capacity
}

// takeCapacity takes a place for req on its model, or refuses it when
// the model is full. The zero load when no capacity applies.
func (s *Server) takeCapacity(req *apiRequest) load {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sc == nil {
		return load{}
	}
	c := s.sc.capacityFor(req.Model)
	if c == nil {
		return load{}
	}
	st := s.loads[req.Model]
	if st == nil {
		st = &loadState{}
		s.loads[req.Model] = st
	}
	capacity := c.at(s.elapsedMs())
	if st.inFlight >= capacity {
		l := load{refused: true, c: c}
		if req.Stream {
			st.streamRefusals++
			n := float64(st.streamRefusals)
			l.midStream = math.Floor(n*c.StreamErrorShare) > math.Floor((n-1)*c.StreamErrorShare)
		}
		return l
	}
	st.inFlight++
	return load{model: req.Model, factor: 1 + float64(st.inFlight)/float64(capacity), c: c}
}

// releaseCapacity gives back the place l holds.
func (s *Server) releaseCapacity(l load) {
	if l.model == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads[l.model].inFlight--
}

// slowed is resp as the load slows it: its delay and its chunks' pauses
// grown by the capacity's latency (resp itself when none applies).
func (l load) slowed(resp *Respond) *Respond {
	if l.c == nil || l.refused || (l.c.LatencyMs == 0 && l.c.ChunkMs == 0) {
		return resp
	}
	r := *resp
	r.DelayMs += int(math.Round(float64(l.c.LatencyMs) * l.factor))
	r.ChunkDelayMs += int(math.Round(float64(l.c.ChunkMs) * l.factor))
	return &r
}
