package fakellm

import (
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// waitInFlight waits (at most 5 s) until model has n calls in flight.
func (ts *testServer) waitInFlight(model string, n int64) {
	ts.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for ts.srv.Stats().InFlight[model] != n {
		if time.Now().After(deadline) {
			ts.t.Fatalf("%s: %d calls in flight, want %d", model, ts.srv.Stats().InFlight[model], n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCapacityOverload: beyond its capacity, a model answers each API's
// overload error, and takes calls again once a place is free.
func TestCapacityOverload(t *testing.T) {
	tests := []struct {
		api          string
		status       int
		typ, message string
	}{
		{APIAnthropic, 529, "overloaded_error", "Overloaded"},
		{APIOpenAIChat, 503, "server_error", "The server is overloaded or not ready yet."},
		{APIOpenAIResponses, 503, "server_error", "The server is overloaded or not ready yet."},
	}
	for _, tt := range tests {
		t.Run(tt.api, func(t *testing.T) {
			// Streams that stall hold their places until their client leaves.
			ts := startJSON(t, `{"capacity": [{"model": "m", "in_flight": 2}],
				"rules": [{"match": {"model": "m"}, "respond": {"text": "hi", "stall_ms": 30000}}]}`)
			held := []*http.Response{ts.do(req{api: tt.api, stream: true}), ts.do(req{api: tt.api, stream: true})}
			ts.waitInFlight("m", 2)

			res := ts.call(req{api: tt.api, stream: true})
			if res.status != tt.status {
				t.Fatalf("status %d, want %d: %s", res.status, tt.status, res.body)
			}
			body := decode(t, res.body)
			if got := str(body, "error", "type"); got != tt.typ {
				t.Errorf("error.type %q, want %q", got, tt.typ)
			}
			if got := str(body, "error", "message"); got != tt.message {
				t.Errorf("error.message %q, want %q", got, tt.message)
			}
			if tt.api == APIAnthropic && str(body, "type") != "error" {
				t.Errorf("type %q, want error", str(body, "type"))
			}
			if st := ts.srv.Stats(); st.ByRule[labelOverloaded] != 1 || st.ByStatus[strconv.Itoa(tt.status)] != 1 {
				t.Errorf("stats by rule %v, by status %v", st.ByRule, st.ByStatus)
			}
			if res := ts.call(req{api: tt.api, model: "other"}); res.status != 200 {
				t.Errorf("another model: status %d, want 200 (a capacity is its model's)", res.status)
			}

			held[0].Body.Close()
			ts.waitInFlight("m", 1)
			again := ts.do(req{api: tt.api, stream: true})
			again.Body.Close()
			held[1].Body.Close()
			if again.StatusCode != 200 {
				t.Errorf("after a place freed: status %d, want 200", again.StatusCode)
			}
			ts.waitInFlight("m", 0)
		})
	}
}

// TestCapacityStreamErrorShare: a share of the overload answers to
// streaming requests are streams that open, then fail with the API's
// in-stream error, before any content; the others, and every answer to a
// request that does not stream, are HTTP errors.
func TestCapacityStreamErrorShare(t *testing.T) {
	tests := []struct {
		api    string
		events []string
		check  func(t *testing.T, last map[string]any)
	}{
		{APIAnthropic, []string{"message_start", "ping", "error"}, func(t *testing.T, last map[string]any) {
			if str(last, "type") != "error" || str(last, "error", "type") != "overloaded_error" || str(last, "error", "message") != "Overloaded" {
				t.Errorf("error event %v", last)
			}
		}},
		{APIOpenAIChat, []string{"data", "data"}, func(t *testing.T, last map[string]any) {
			if str(last, "error", "type") != "server_error" || str(last, "error", "message") != "The server is overloaded or not ready yet." {
				t.Errorf("error chunk %v", last)
			}
		}},
		{APIOpenAIResponses, []string{"response.created", "response.in_progress", "error"}, func(t *testing.T, last map[string]any) {
			if str(last, "code") != "server_error" || walk(last, "sequence_number") != 2.0 {
				t.Errorf("error event %v", last)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.api, func(t *testing.T) {
			ts := startJSON(t, `{"capacity": [{"in_flight": 0, "stream_error_share": 0.5}]}`)
			for i, want := range []string{"http", "stream", "http", "stream"} {
				res := ts.call(req{api: tt.api, stream: true})
				switch {
				case want == "http" && res.status != http.StatusOK:
				case want == "stream" && res.status == http.StatusOK && res.readErr == nil:
					equal(t, "events", names(res.events), tt.events)
					tt.check(t, res.events[len(res.events)-1].json(t))
				default:
					t.Errorf("answer %d: status %d (%v), want %s", i+1, res.status, res.readErr, want)
				}
			}
			if res := ts.call(req{api: tt.api}); res.status == http.StatusOK {
				t.Errorf("a request that does not stream: status 200, want the HTTP error")
			}
			if st := ts.srv.Stats(); st.ByRule[labelOverloaded] != 5 || st.Errors != 5 {
				t.Errorf("stats: by rule %v, errors %d; want 5 overload answers, all errors", st.ByRule, st.Errors)
			}
		})
	}
}

// TestCapacityChanges: a scenario changes the capacity over time, on the
// server's clock.
func TestCapacityChanges(t *testing.T) {
	ts := startJSON(t, `{"capacity": [{"model": "m", "in_flight": 1,
		"changes": [{"from_ms": 1000, "in_flight": 0}, {"from_ms": 61000, "in_flight": 1}]}]}`)
	clk := newTestClock()
	ts.srv.SetClock(clk.Now)
	var now time.Duration
	for _, tt := range []struct {
		at     time.Duration
		status int
	}{
		{0, 200},
		{999 * time.Millisecond, 200},
		{time.Second, 529},
		{60 * time.Second, 529},
		{61 * time.Second, 200},
		{10 * time.Minute, 200},
	} {
		clk.Advance(tt.at - now)
		now = tt.at
		if res := ts.call(req{api: APIAnthropic}); res.status != tt.status {
			t.Errorf("at %v: status %d, want %d", tt.at, res.status, tt.status)
		}
	}
}

// TestCapacityLatency: an answer starts after latency_ms × (1 + n/c), n
// calls in flight of a capacity c, and its chunks pause chunk_ms × the
// same.
func TestCapacityLatency(t *testing.T) {
	s := New(mustParse(t, `{"capacity": [{"in_flight": 4, "latency_ms": 100, "chunk_ms": 10}]}`))
	resp := &Respond{Text: "hi", DelayMs: 5}
	for _, tt := range []struct {
		inFlight       int
		delay, chunkMs int
	}{
		{1, 5 + 125, 13}, // 1.25×
		{2, 5 + 150, 15},
		{3, 5 + 175, 18},
		{4, 5 + 200, 20}, // full: twice as slow
	} {
		l := s.takeCapacity(&apiRequest{Model: "m"})
		got := l.slowed(resp)
		if got.DelayMs != tt.delay || got.ChunkDelayMs != tt.chunkMs {
			t.Errorf("%d in flight: delay %d ms, chunks %d ms; want %d, %d", tt.inFlight, got.DelayMs, got.ChunkDelayMs, tt.delay, tt.chunkMs)
		}
	}
	if l := s.takeCapacity(&apiRequest{Model: "m"}); !l.refused || l.slowed(resp) != resp {
		t.Errorf("a fifth call: %+v, want refused and not slowed", l)
	}
	if resp.DelayMs != 5 || resp.ChunkDelayMs != 0 {
		t.Errorf("the scenario's respond changed: %+v", resp)
	}

	// On the wire: the answer's status line waits for the latency.
	ts := startJSON(t, `{"capacity": [{"in_flight": 1, "latency_ms": 60}]}`)
	began := time.Now()
	if res := ts.call(req{api: APIOpenAIChat, stream: true}); res.status != 200 {
		t.Fatalf("status %d", res.status)
	}
	if took := time.Since(began); took < 120*time.Millisecond {
		t.Errorf("the answer took %v, want at least 120 ms (60 ms × 2, full)", took)
	}
}

// TestCapacityBeforeRateLimits: an overload answer takes nothing from the
// rate limits; a call the rate limits refuse gives its place back.
func TestCapacityBeforeRateLimits(t *testing.T) {
	ts := startJSON(t, `{"capacity": [{"in_flight": 0, "changes": [{"from_ms": 1000, "in_flight": 1}]}],
		"limits": [{"rpm": 1}]}`)
	clk := newTestClock()
	ts.srv.SetClock(clk.Now)
	for i, want := range []int{529, 529} {
		if res := ts.call(req{api: APIAnthropic, key: "k"}); res.status != want {
			t.Errorf("call %d at 0 s: status %d, want %d", i+1, res.status, want)
		}
	}
	clk.Advance(time.Second)
	for i, want := range []int{200, 429, 429} {
		if res := ts.call(req{api: APIAnthropic, key: "k"}); res.status != want {
			t.Errorf("call %d at 1 s: status %d, want %d", i+1, res.status, want)
		}
	}
	ts.waitInFlight("m", 0)
}

// TestBadCapacity: the capacity is checked like the rest of a scenario.
func TestBadCapacity(t *testing.T) {
	for _, tc := range []struct {
		name, doc, path, msg string
	}{
		{"not an array", `{"capacity": {}}`, "capacity", "must be an array"},
		{"unknown field", `{"capacity": [{"in_flight": 1, "inflight": 2}]}`, "capacity[0].inflight",
			"unknown field (allowed: model, in_flight, changes, latency_ms, chunk_ms, stream_error_share)"},
		{"no in_flight", `{"capacity": [{"model": "m"}]}`, "capacity[0].in_flight", "missing"},
		{"negative", `{"capacity": [{"in_flight": -1}]}`, "capacity[0].in_flight", "must be 0-1000000, got -1"},
		{"fractional", `{"capacity": [{"in_flight": 1.5}]}`, "capacity[0].in_flight", "must be an integer"},
		{"latency negative", `{"capacity": [{"in_flight": 1, "latency_ms": -1}]}`, "capacity[0].latency_ms", "must be 0-600000"},
		{"share above 1", `{"capacity": [{"in_flight": 1, "stream_error_share": 1.5}]}`, "capacity[0].stream_error_share", "must be 0-1, got 1.5"},
		{"share a string", `{"capacity": [{"in_flight": 1, "stream_error_share": "half"}]}`, "capacity[0].stream_error_share", "must be a number"},
		{"change without time", `{"capacity": [{"in_flight": 1, "changes": [{"in_flight": 2}]}]}`, "capacity[0].changes[0].from_ms", "missing"},
		{"changes out of order", `{"capacity": [{"in_flight": 1, "changes": [{"from_ms": 2000, "in_flight": 2}, {"from_ms": 1000, "in_flight": 3}]}]}`,
			"capacity[0].changes[1].from_ms", "must be greater than 2000"},
		{"change at 0", `{"capacity": [{"in_flight": 1, "changes": [{"from_ms": 0, "in_flight": 2}]}]}`, "capacity[0].changes[0].from_ms", "must be greater than 0"},
		{"shadowed", `{"capacity": [{"in_flight": 1}, {"model": "m", "in_flight": 2}]}`, "capacity[1]", `never applies: capacity[0] (model "")`},
		{"duplicate", `{"capacity": [{"model": "m", "in_flight": 1}, {"model": "m", "in_flight": 2}]}`, "capacity[1]", "never applies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseScenario([]byte(tc.doc))
			var se *ScenarioError
			if !errors.As(err, &se) || se.Path != tc.path || !strings.Contains(se.Msg, tc.msg) {
				t.Errorf("error %v\nwant path %q and a message with %q", err, tc.path, tc.msg)
			}
		})
	}
	ok := mustParse(t, `{"capacity": [{"model": "m", "in_flight": 200, "latency_ms": 500, "chunk_ms": 20, "stream_error_share": 0.25,
		"changes": [{"from_ms": 20000, "in_flight": 40}, {"from_ms": 80000, "in_flight": 200}]}, {"in_flight": 0}]}`)
	want := []Capacity{{Model: "m", InFlight: 200, LatencyMs: 500, ChunkMs: 20, StreamErrorShare: 0.25,
		Changes: []CapacityChange{{FromMs: 20000, InFlight: 40}, {FromMs: 80000, InFlight: 200}}}, {}}
	if !reflect.DeepEqual(ok.Capacity, want) {
		t.Errorf("capacity %+v\nwant %+v", ok.Capacity, want)
	}
	for _, at := range []struct {
		ms   int64
		want int
	}{{0, 200}, {19999, 200}, {20000, 40}, {79999, 40}, {80000, 200}} {
		if got := ok.Capacity[0].at(at.ms); got != at.want {
			t.Errorf("capacity at %d ms: %d, want %d", at.ms, got, at.want)
		}
	}
}
