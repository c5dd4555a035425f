package fakellm

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// shiftClock moves the server's clock origin back by d, as if d had
// passed (tests of long windows without sleeping).
func shiftClock(srv *Server, d time.Duration) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.start = srv.start.Add(-d)
}

func loadTestdata(t *testing.T, name string) *Scenario {
	t.Helper()
	sc, err := LoadScenario("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestKeyRule(t *testing.T) {
	ts := start(t, loadTestdata(t, "keys.json"))
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			res := ts.call(req{api: api, key: "key-a", stream: true})
			if res.status != 429 || res.header.Get("Retry-After") != "3600" || !strings.Contains(string(res.body), "usage limit") {
				t.Errorf("key-a: %d %v %s", res.status, res.header, res.body)
			}
			res = ts.call(req{api: api, key: "key-b", stream: true})
			if res.status != 200 || !terminal(res.events) {
				t.Errorf("key-b: %d %q", res.status, names(res.events))
			}
			if res := ts.call(req{api: api, key: "key-c", stream: true}); res.status != 401 {
				t.Errorf("other key: %d %s", res.status, res.body)
			}
		})
	}
	st := ts.srv.Stats()
	if st.ByKey["key-a"] != 3 || st.ByKey["key-b"] != 3 || st.ByRule["key-a-usage-limit"] != 3 || st.ByRule["key-b-ok"] != 3 || st.ByRule["default"] != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestModelRule(t *testing.T) {
	ts := start(t, loadTestdata(t, "fallback.json"))
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			res := ts.call(req{api: api, model: "m1", stream: true})
			want := 503
			if api == APIAnthropic {
				want = 529
			}
			if res.status != want || !strings.Contains(strings.ToLower(string(res.body)), "overloaded") {
				t.Errorf("m1: %d %s", res.status, res.body)
			}
			res = ts.call(req{api: api, model: "m2", stream: true})
			if res.status != 200 || !terminal(res.events) {
				t.Errorf("m2: %d %q", res.status, names(res.events))
			}
		})
	}
}

func TestAPIRule(t *testing.T) {
	ts := startJSON(t, `{"rules": [{"match": {"api": "openai-responses"}, "respond": {"preset": "server_error"}}]}`)
	for _, api := range apis {
		res := ts.call(req{api: api, stream: true})
		if want := map[bool]int{true: 500, false: 200}[api == APIOpenAIResponses]; res.status != want {
			t.Errorf("%s: %d, want %d", api, res.status, want)
		}
	}
}

// TestSetClock: with an injected clock the windows and by_window follow
// it, not the wall clock.
func TestSetClock(t *testing.T) {
	ts := startJSON(t, `{"rules": [{"name": "early", "match": {"to_ms": 60000}, "respond": {"status": 503}}]}`)
	clk := newTestClock()
	ts.srv.SetClock(clk.Now)
	if got := ts.call(req{api: APIOpenAIChat}).status; got != 503 {
		t.Errorf("t=0: status %d, want 503", got)
	}
	clk.Advance(time.Minute)
	if got := ts.call(req{api: APIOpenAIChat}).status; got != 200 {
		t.Errorf("t=1m: status %d, want 200", got)
	}
	st := ts.srv.Stats()
	want := []Window{{TMs: 0, Requests: 1, Errors: 1}, {TMs: 60000, Requests: 1}}
	if !reflect.DeepEqual(st.ByWindow, want) {
		t.Errorf("by_window %+v, want %+v", st.ByWindow, want)
	}
	// SetClock restarts the clock; nil goes back to the wall clock.
	ts.srv.SetClock(nil)
	if got := ts.call(req{api: APIOpenAIChat}).status; got != 503 {
		t.Errorf("after SetClock(nil): status %d, want 503", got)
	}
}

func TestTimeWindow(t *testing.T) {
	ts := startJSON(t, `{"rules": [
		{"name": "early", "match": {"from_ms": 0, "to_ms": 200}, "respond": {"status": 503}},
		{"name": "late", "match": {"from_ms": 400, "to_ms": 700}, "respond": {"status": 429}}]}`)
	status := func() int {
		t.Helper()
		return ts.call(req{api: APIOpenAIChat, stream: true}).status
	}
	ts.srv.ResetClock()
	t0 := time.Now()
	if got := status(); got != 503 {
		t.Errorf("t=%v: status %d, want 503 (early window)", time.Since(t0), got)
	}
	time.Sleep(time.Until(t0.Add(220 * time.Millisecond)))
	if got := status(); got != 200 {
		t.Errorf("t=%v: status %d, want 200 (between windows)", time.Since(t0), got)
	}
	time.Sleep(time.Until(t0.Add(420 * time.Millisecond)))
	if got := status(); got != 429 {
		t.Errorf("t=%v: status %d, want 429 (late window)", time.Since(t0), got)
	}
	// ResetClock starts the windows over.
	ts.srv.ResetClock()
	if got := status(); got != 503 {
		t.Errorf("after ResetClock: status %d, want 503", got)
	}
	// Past every window.
	shiftClock(ts.srv, time.Second)
	if got := status(); got != 200 {
		t.Errorf("after the windows: status %d, want 200", got)
	}
}

func TestOutageScenario(t *testing.T) {
	ts := start(t, loadTestdata(t, "outage.json"))
	var got []int
	for range 5 {
		res := ts.call(req{api: APIAnthropic, stream: true})
		got = append(got, res.status)
		if res.status == 429 && res.header.Get("Retry-After") != "1" {
			t.Errorf("429 without retry-after: %v", res.header)
		}
	}
	if !reflect.DeepEqual(got, []int{429, 429, 429, 503, 503}) {
		t.Errorf("during the outage: %v", got)
	}
	shiftClock(ts.srv, 5*time.Second)
	res := ts.call(req{api: APIAnthropic, stream: true})
	if res.status != 200 || strings.Join(deltas(t, res.events, "content_block_delta", "delta", "text"), "") != "Recovered: hello from fakellm" {
		t.Errorf("after the outage: %d %q", res.status, names(res.events))
	}
}

func TestFirstN(t *testing.T) {
	sc := mustParse(t, `{"rules": [
		{"name": "flaky", "match": {"model": "m", "first": 2}, "respond": {"preset": "overloaded"}},
		{"name": "other", "match": {"model": "other", "first": 1}, "respond": {"status": 500}}]}`)
	ts := start(t, sc)
	var got []int
	for range 4 {
		got = append(got, ts.call(req{api: APIAnthropic, stream: true}).status)
	}
	if !reflect.DeepEqual(got, []int{529, 529, 200, 200}) {
		t.Errorf("statuses %v, want 529 529 200 200", got)
	}
	// Requests that do not match the other fields do not use up "first".
	if s := ts.call(req{api: APIAnthropic, model: "other", stream: true}).status; s != 500 {
		t.Errorf("other: %d", s)
	}
	// SetScenario starts the counters over.
	ts.srv.SetScenario(sc)
	if s := ts.call(req{api: APIAnthropic, stream: true}).status; s != 529 {
		t.Errorf("after SetScenario: %d, want 529", s)
	}
	if st := ts.srv.Stats(); st.ByRule["flaky"] != 3 || st.ByRule["other"] != 1 || st.ByRule["default"] != 2 {
		t.Errorf("by_rule %v", st.ByRule)
	}
}

func TestSetScenario(t *testing.T) {
	ts := start(t, nil)
	if s := ts.call(req{api: APIOpenAIChat, stream: true}).status; s != 200 {
		t.Fatalf("status %d", s)
	}
	ts.srv.SetScenario(mustParse(t, `{"default": {"preset": "bad_gateway"}}`))
	if s := ts.call(req{api: APIOpenAIChat, stream: true}).status; s != 502 {
		t.Errorf("after SetScenario: %d, want 502", s)
	}
	ts.srv.SetScenario(nil)
	if s := ts.call(req{api: APIOpenAIChat, stream: true}).status; s != 200 {
		t.Errorf("after SetScenario(nil): %d", s)
	}
}

// completedID streams a Responses request and returns the id from
// response.completed.
func completedID(t *testing.T, ts *testServer, r req) string {
	t.Helper()
	res := ts.call(r)
	if res.status != 200 || len(res.events) == 0 {
		t.Fatalf("status %d: %s", res.status, res.body)
	}
	last := res.events[len(res.events)-1]
	if last.Event != "response.completed" {
		t.Fatalf("last event %q", last.Event)
	}
	m := last.json(t)
	if got := walk(m, "response", "previous_response_id"); r.prev != "" && got != r.prev {
		t.Errorf("previous_response_id %v, want %q", got, r.prev)
	}
	return str(m, "response", "id")
}

func TestResponsesPreviousResponseID(t *testing.T) {
	ts := startJSON(t, `{"rules": [{"name": "stale", "match": {"model": "stale"}, "respond": {"forget_previous": true}}]}`)
	r := req{api: APIOpenAIResponses, stream: true}

	id1 := completedID(t, ts, r)
	r.prev = id1
	id2 := completedID(t, ts, r)
	if id1 == id2 || !strings.HasPrefix(id2, "resp_") {
		t.Errorf("ids %q %q", id1, id2)
	}

	t.Run("unknown id", func(t *testing.T) {
		res := ts.call(req{api: APIOpenAIResponses, stream: true, prev: "resp_x"})
		want := `{"error":{"message":"Previous response with id 'resp_x' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}`
		if res.status != 400 || strings.TrimSpace(string(res.body)) != want {
			t.Errorf("%d %s\nwant 400 %s", res.status, res.body, want)
		}
	})
	t.Run("forget_previous", func(t *testing.T) {
		res := ts.call(req{api: APIOpenAIResponses, stream: true, model: "stale", prev: id2})
		if res.status != 400 || !strings.Contains(string(res.body), "Previous response with id '"+id2+"' not found.") {
			t.Errorf("%d %s", res.status, res.body)
		}
		// Forgotten for good.
		if res := ts.call(req{api: APIOpenAIResponses, stream: true, prev: id2}); res.status != 400 {
			t.Errorf("forgotten id answered %d", res.status)
		}
		// Without a previous_response_id the rule streams.
		if res := ts.call(req{api: APIOpenAIResponses, stream: true, model: "stale"}); res.status != 200 {
			t.Errorf("no previous id: %d", res.status)
		}
		// The id it still knows keeps working.
		completedID(t, ts, req{api: APIOpenAIResponses, stream: true, prev: id1})
	})
	t.Run("store false", func(t *testing.T) {
		id := completedID(t, ts, req{api: APIOpenAIResponses, stream: true, extra: map[string]any{"store": false}})
		if res := ts.call(req{api: APIOpenAIResponses, stream: true, prev: id}); res.status != 400 {
			t.Errorf("unstored id answered %d", res.status)
		}
	})
	t.Run("Forget", func(t *testing.T) {
		id := completedID(t, ts, req{api: APIOpenAIResponses, stream: true})
		ts.srv.Forget(id)
		if res := ts.call(req{api: APIOpenAIResponses, stream: true, prev: id}); res.status != 400 {
			t.Errorf("forgotten id answered %d", res.status)
		}
	})
}

func TestStats(t *testing.T) {
	ts := startJSON(t, `{"rules": [
		{"name": "limited", "match": {"key": "key-a"}, "respond": {"preset": "rate_limit"}},
		{"match": {"model": "boom"}, "respond": {"stream_error": true}},
		{"name": "cut", "match": {"model": "cut"}, "respond": {"cut_after": 1}}]}`)
	ts.call(req{api: APIAnthropic, key: "key-a", model: "m1", stream: true})
	ts.call(req{api: APIOpenAIChat, key: "key-a", model: "m1", stream: true})
	ts.call(req{api: APIOpenAIChat, key: "key-b", model: "m2", stream: true})
	ts.call(req{api: APIOpenAIResponses, key: "key-b", model: "boom", stream: true})
	ts.call(req{api: APIAnthropic, key: "key-b", model: "cut", stream: true})

	st := ts.srv.Stats()
	want := Stats{
		Total: 5, Errors: 4,
		ByKey:    map[string]int64{"key-a": 2, "key-b": 3},
		ByModel:  map[string]int64{"m1": 2, "m2": 1, "boom": 1, "cut": 1},
		ByAPI:    map[string]int64{APIAnthropic: 2, APIOpenAIChat: 2, APIOpenAIResponses: 1},
		ByRule:   map[string]int64{"limited": 2, "rules[1]": 1, "cut": 1, "default": 1},
		ByStatus: map[string]int64{"429": 2, "200": 3},
		ByLimit:  map[string]int64{},
		InFlight: map[string]int64{},
	}
	got := st
	got.ByWindow, got.Active = nil, 0 // a cut stream's handler may still be unwinding
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stats\n got %+v\nwant %+v", got, want)
	}
	var reqs, errs int64
	for i, w := range st.ByWindow {
		if w.TMs%WindowMs != 0 || i > 0 && w.TMs <= st.ByWindow[i-1].TMs {
			t.Errorf("window %d: t_ms %d", i, w.TMs)
		}
		reqs += w.Requests
		errs += w.Errors
	}
	if reqs != 5 || errs != 4 {
		t.Errorf("by_window sums: %d requests, %d errors: %+v", reqs, errs, st.ByWindow)
	}

	// GET /stats serves the same, as JSON.
	resp, err := ts.client.Get(ts.base + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	var viaHTTP Stats
	if err := json.NewDecoder(resp.Body).Decode(&viaHTTP); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	direct := ts.srv.Stats()
	viaHTTP.Active, direct.Active = 0, 0
	if !reflect.DeepEqual(viaHTTP, direct) {
		t.Errorf("GET /stats %+v\nStats() %+v", viaHTTP, ts.srv.Stats())
	}
	// Only POST resets.
	resp, err = ts.client.Get(ts.base + "/stats/reset")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || ts.srv.Stats().Total != 5 {
		t.Errorf("GET /stats/reset: %d", resp.StatusCode)
	}
	resp, err = ts.client.Post(ts.base+"/stats/reset", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st := ts.srv.Stats(); resp.StatusCode != 200 || st.Total != 0 || st.Errors != 0 || len(st.ByKey) != 0 || len(st.ByWindow) != 0 {
		t.Errorf("after reset: %d %+v", resp.StatusCode, st)
	}
	// ResetClock clears the windows but not the totals; POST /clock/reset
	// does the same.
	ts.call(req{api: APIAnthropic, stream: true})
	resp, err = ts.client.Post(ts.base+"/clock/reset", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st := ts.srv.Stats(); st.Total != 1 || len(st.ByWindow) != 0 {
		t.Errorf("after clock reset: %+v", st)
	}
}
