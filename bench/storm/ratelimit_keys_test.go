package main

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// sec is x seconds.
func sec(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }

// endedAt are the records of prompts answered at ends (seconds; a
// negative end: never answered), in order.
func endedAt(ends ...float64) []rlPrompt {
	out := make([]rlPrompt, len(ends))
	for i, e := range ends {
		out[i].begun = true
		if e >= 0 {
			out[i].ended, out[i].ok, out[i].end = true, true, sec(e)
		}
	}
	return out
}

func TestKeyFigures(t *testing.T) {
	a, b := limitedKey, freeKey
	req := func(at float64, session int, key string, refused bool) rlRequest {
		return rlRequest{sec(at), session, key, refused}
	}
	arr := func(at float64, key string, refused bool) rlArrival { return rlArrival{sec(at), key, refused} }
	wait := func(at float64, session int, key string) rlWait { return rlWait{sec(at), session, key} }
	for _, tc := range []struct {
		name string
		log  rlKeyLog
		want map[string]float64
	}{
		{"paced: overlapping waits, a switch to the other key, refusals are no admission", rlKeyLog{
			paced: true,
			// key-a waited for over [1, 4) ∪ [2, 7) ∪ [3, 3.5) = [1, 7), admitting at 3.5 and 4: idle 1–3.5 and 4–7;
			// key-b over [0.5, 3) (session 2 moves to key-a at 3), admitting nothing (a 429 at 2).
			waits: []rlWait{wait(1, 0, a), wait(2, 1, a), wait(0.5, 2, b), wait(3, 2, a)},
			requests: []rlRequest{req(0.2, 0, a, false), req(4, 0, a, false), req(7, 1, a, false),
				req(3.5, 2, a, false), req(8, 2, b, false)},
			arrivals: []rlArrival{arr(0.2, a, false), arr(7, a, false), arr(4, a, false), arr(3.5, a, false),
				arr(5, a, true), arr(8, b, false), arr(2, b, true)},
			end: sec(10),
		}, map[string]float64{
			"max_key_idle_s": 3, "max_key_idle_s_key-a": 3, "max_key_idle_s_key-b": 2.5,
			"max_admissions_per_second": 2, "max_admissions_per_second_key-a": 2, "max_admissions_per_second_key-b": 1,
			"stayed_on_key_share": 0.5, "turns_with_a_previous_turn": 2, // session 0 stays on key-a, session 2 moves
		}},
		{"paced: a wait never granted ends with the run; no turn after a turn", rlKeyLog{
			paced:    true,
			waits:    []rlWait{wait(6, 0, b)},
			requests: []rlRequest{req(1, 0, a, false)},
			arrivals: []rlArrival{arr(1, a, false)},
			end:      sec(10),
		}, map[string]float64{
			"max_key_idle_s": 4, "max_key_idle_s_key-a": 0, "max_key_idle_s_key-b": 4,
			"max_admissions_per_second": 1, "max_admissions_per_second_key-a": 1, "max_admissions_per_second_key-b": 0,
			"turns_with_a_previous_turn": 0,
		}},
		{"paced: a request without a wait opens nothing", rlKeyLog{
			paced:    true,
			requests: []rlRequest{req(0, 0, a, false), req(5, 0, a, false), req(9, 1, b, false)},
			arrivals: []rlArrival{arr(0, a, false), arr(5, a, false), arr(9, b, false)},
			end:      sec(10),
		}, map[string]float64{
			"max_key_idle_s": 0, "max_key_idle_s_key-a": 0, "max_key_idle_s_key-b": 0,
			"max_admissions_per_second": 1, "stayed_on_key_share": 1, "turns_with_a_previous_turn": 1,
		}},
		{"unpaced: a prompt waits for the key of its latest request until answered", rlKeyLog{
			// Session 0: prompt 1 on key-a over [0, 5) (a 429 at 0, admitted at 2), prompt 2 on key-b
			// over [5, 9). Session 1: prompt 1 on key-b over [0, 4) (two 429s), then key-a to 6;
			// prompt 2 on key-a from 6, never answered (to the end, 12). Session 2: key-a [0, 1), [1, 2).
			// key-a: waited for over [0, 12), admitting at 0, 1, 2, 4, 6: idle 6–12. key-b: [0, 4) with
			// no admission, then [5, 9) admitting at 5: idle 0–4 and 5–9.
			prompts: endedAt(5, 9, 6, -1, 1, 2),
			requests: []rlRequest{req(0, 0, a, true), req(2, 0, a, false), req(5, 0, b, false),
				req(0, 1, b, true), req(3, 1, b, true), req(4, 1, a, false), req(6, 1, a, false),
				req(0, 2, a, false), req(1, 2, a, false)},
			arrivals: []rlArrival{arr(0, a, true), arr(2, a, false), arr(5, b, false), arr(0, b, true), arr(3, b, true),
				arr(4, a, false), arr(6, a, false), arr(0, a, false), arr(1, a, false)},
			end: sec(12),
		}, map[string]float64{
			"max_key_idle_s": 6, "max_key_idle_s_key-a": 6, "max_key_idle_s_key-b": 4,
			// key-a's admissions are a second apart: no window [t, t + 1 s) holds two.
			"max_admissions_per_second": 1, "max_admissions_per_second_key-a": 1, "max_admissions_per_second_key-b": 1,
			"stayed_on_key_share": 4.0 / 6, "turns_with_a_previous_turn": 6,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.log
			l.sc = testRLScenario(3, 2)
			f := map[string]float64{}
			keyFigures(f, &l)
			for k, want := range tc.want {
				if got, ok := f[k]; !ok || !near(got, want) {
					t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
				}
			}
			if _, ok := tc.want["stayed_on_key_share"]; !ok {
				if v, has := f["stayed_on_key_share"]; has {
					t.Errorf("stayed_on_key_share = %v with no turn after a turn", v)
				}
			}
			if t.Failed() {
				t.Logf("figures: %v", f)
			}
		})
	}
}

func TestLongestIdle(t *testing.T) {
	for _, tc := range []struct {
		name       string
		spans      []span
		admissions []float64
		want       float64
	}{
		{"no wait", nil, []float64{1, 2}, 0},
		{"a wait with no admission", []span{{sec(1), sec(4)}}, nil, 3},
		{"admissions outside the waits count nothing", []span{{sec(2), sec(3)}}, []float64{0, 1, 5}, 1},
		{"an admission splits a wait", []span{{sec(0), sec(10)}}, []float64{3}, 7},
		{"overlapping waits are one stretch", []span{{sec(0), sec(4)}, {sec(3), sec(9)}}, []float64{2}, 7},
		{"a gap between waits ends the stretch", []span{{sec(0), sec(4)}, {sec(5), sec(8)}}, nil, 4},
		{"an admission as the wait opens", []span{{sec(2), sec(5)}}, []float64{2, 4.5}, 2.5},
		{"an admission as the wait closes", []span{{sec(2), sec(5)}}, []float64{5}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ats := make([]time.Duration, len(tc.admissions))
			for i, x := range tc.admissions {
				ats[i] = sec(x)
			}
			if got := longestIdle(tc.spans, ats); got != sec(tc.want) {
				t.Errorf("longestIdle = %v, want %v", got, sec(tc.want))
			}
		})
	}
}

func TestMostInASecond(t *testing.T) {
	for _, tc := range []struct {
		name  string
		times []float64
		want  int
	}{
		{"none", nil, 0},
		{"one", []float64{3}, 1},
		{"within a second", []float64{0, 0.5, 0.999}, 3},
		{"a second apart", []float64{0, 1, 2}, 1},
		{"the window slides", []float64{0, 0.5, 1, 1.2, 3}, 3},
		{"a burst later", []float64{0, 5, 5, 5, 5.9}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := make([]time.Duration, len(tc.times))
			for i, x := range tc.times {
				ts[i] = sec(x)
			}
			if got := mostInASecond(ts); got != tc.want {
				t.Errorf("mostInASecond(%v) = %d, want %d", tc.times, got, tc.want)
			}
		})
	}
}

func TestWaitSpans(t *testing.T) {
	a, b := limitedKey, freeKey
	mark := func(at float64, session int, key string) rlMark { return rlMark{sec(at), session, key} }
	for _, tc := range []struct {
		name  string
		marks []rlMark
		want  map[string][]span
	}{
		{"opened and closed", []rlMark{mark(1, 0, a), mark(3, 0, "")}, map[string][]span{a: {{sec(1), sec(3)}}}},
		{"the same key again continues", []rlMark{mark(1, 0, a), mark(2, 0, a), mark(3, 0, "")},
			map[string][]span{a: {{sec(1), sec(3)}}}},
		{"another key ends the first", []rlMark{mark(1, 0, a), mark(2, 0, b), mark(3, 0, "")},
			map[string][]span{a: {{sec(1), sec(2)}}, b: {{sec(2), sec(3)}}}},
		{"open at the session's last mark: to the end", []rlMark{mark(1, 0, a), mark(2, 1, b), mark(4, 1, "")},
			map[string][]span{a: {{sec(1), sec(10)}}, b: {{sec(2), sec(4)}}}},
		{"a close with nothing open", []rlMark{mark(1, 0, ""), mark(2, 0, b)}, map[string][]span{b: {{sec(2), sec(10)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := waitSpans(tc.marks, sec(10))
			if !maps.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("waitSpans = %v, want %v", got, tc.want)
			}
		})
	}
}
