package fakellm

import (
	"sort"
	"strconv"
)

// WindowMs is the width of a Stats.ByWindow bucket.
const WindowMs = 100

// Stats counts the API requests the server has answered since it started
// (or since ResetStats). Every API request counts once, when its answer is
// chosen (before any delay), including those the server itself rejected
// (bad JSON, missing key...), which count under the rule "(invalid)".
type Stats struct {
	Total int64 `json:"total"`
	// Active is the number of API requests being answered right now
	// (delayed, streaming or stalled).
	Active int64 `json:"active"`
	Errors int64 `json:"errors"` // HTTP status >= 400, in-stream errors and cut connections
	// ByKey counts by API key ("" when none was sent).
	ByKey   map[string]int64 `json:"by_key"`
	ByModel map[string]int64 `json:"by_model"`
	ByAPI   map[string]int64 `json:"by_api"`
	// ByRule counts by the rule that answered: its name, "rules[<i>]"
	// when unnamed, "default", "(invalid)", "(rate_limit)" for the 429s
	// of the scenario's rate limits, or "(overloaded)" for the overload
	// answers of its capacity.
	ByRule map[string]int64 `json:"by_rule"`
	// ByStatus counts by HTTP status ("200", "429", ...); in-stream errors
	// and cut streams count as "200".
	ByStatus map[string]int64 `json:"by_status"`
	// ByLimit counts the 429s of the scenario's rate limits (the rule
	// "(rate_limit)") by the limit that refused: LimitRequests,
	// LimitTokens, LimitInputTokens or LimitOutputTokens.
	ByLimit map[string]int64 `json:"by_limit"`
	// ByWindow holds the non-empty 100 ms buckets in time order; T is the
	// bucket's start in ms since the clock started (or ResetClock).
	ByWindow []Window `json:"by_window"`
	// InFlight counts, by model, the calls that hold a place in the
	// scenario's capacity now (models it never applied to are left out).
	InFlight map[string]int64 `json:"in_flight"`
}

// Window is one 100 ms bucket of Stats.ByWindow.
type Window struct {
	TMs      int64 `json:"t_ms"`
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
}

type statsState struct {
	total, errors                           int64
	byKey, byModel, byAPI, byRule, byStatus map[string]int64
	byLimit                                 map[string]int64
	windows                                 map[int64]*Window
}

func (st *statsState) reset() {
	*st = statsState{
		byKey: map[string]int64{}, byModel: map[string]int64{}, byAPI: map[string]int64{},
		byRule: map[string]int64{}, byStatus: map[string]int64{}, byLimit: map[string]int64{},
		windows: map[int64]*Window{},
	}
}

func (s *Server) record(req *apiRequest, rule string, status int, failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.stats
	st.total++
	st.byKey[req.key]++
	st.byModel[req.Model]++
	st.byAPI[req.api]++
	st.byRule[rule]++
	st.byStatus[strconv.Itoa(status)]++
	t := s.elapsedMs() / WindowMs * WindowMs
	w := st.windows[t]
	if w == nil {
		w = &Window{TMs: t}
		st.windows[t] = w
	}
	w.Requests++
	if failed {
		st.errors++
		w.Errors++
	}
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.stats
	cp := func(m map[string]int64) map[string]int64 {
		out := make(map[string]int64, len(m))
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	out := Stats{
		Total: st.total, Active: s.active.Load(), Errors: st.errors,
		ByKey: cp(st.byKey), ByModel: cp(st.byModel), ByAPI: cp(st.byAPI),
		ByRule: cp(st.byRule), ByStatus: cp(st.byStatus), ByLimit: cp(st.byLimit),
		ByWindow: make([]Window, 0, len(st.windows)), InFlight: make(map[string]int64, len(s.loads)),
	}
	for model, l := range s.loads {
		out.InFlight[model] = int64(l.inFlight)
	}
	for _, w := range st.windows {
		out.ByWindow = append(out.ByWindow, *w)
	}
	sort.Slice(out.ByWindow, func(i, j int) bool { return out.ByWindow[i].TMs < out.ByWindow[j].TMs })
	return out
}

// ResetStats zeroes every counter (POST /stats/reset does the same).
func (s *Server) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.reset()
}
