package main

import (
	"cmp"
	"slices"
	"time"
)

// The ratelimit storm's per-key figures (issue 37): how long each key
// admitted nothing while turns waited for it, the most requests it
// admitted in one second, and the share of turns that stayed on their
// session's previous key. They are computed after the run from three
// logs: the requests as the harness sent them (session and key), the
// requests as the server's front saw them arrive (key, refused or not),
// and MusePi's rate_limit_wait events.

// rlRequest is one provider request as the harness sent it.
type rlRequest struct {
	at      time.Duration // from the start of the run
	session int
	key     string // the API key sent, as the server sees it
	refused bool   // answered with a 429
}

// rlArrival is one API request as the server's front saw it arrive.
type rlArrival struct {
	at      time.Duration
	key     string
	refused bool // answered with a 429: the key admitted nothing
}

// rlWait is a rate_limit_wait event: the session's turn began waiting
// for key's budget at at.
type rlWait struct {
	at      time.Duration
	session int
	key     string
}

// rlKeyLog is what the per-key figures are computed from.
type rlKeyLog struct {
	sc *rateLimitScenario
	// paced: the turns' waits are the pacing waits (from a rate_limit_wait
	// to the session's next request); otherwise a prompt waits for the key
	// of its latest request until it is answered.
	paced    bool
	requests []rlRequest
	arrivals []rlArrival
	waits    []rlWait
	prompts  []rlPrompt    // session i's prompt j at i*sc.Prompts + j
	end      time.Duration // the end of the run: waits still open end here
}

// rlMark opens a session's wait for key at at, or closes it (key "").
type rlMark struct {
	at      time.Duration
	session int
	key     string
}

// span is a stretch of time [from, to).
type span struct{ from, to time.Duration }

// keyFigures adds l's per-key figures to f: max_key_idle_s and
// max_admissions_per_second (the largest over the keys, and each key's
// with the key's name as suffix), stayed_on_key_share and
// turns_with_a_previous_turn.
func keyFigures(f map[string]float64, l *rlKeyLog) {
	spans := waitSpans(l.waitMarks(), l.end)
	admitted := map[string][]time.Duration{}
	for _, a := range l.arrivals {
		if !a.refused {
			admitted[a.key] = append(admitted[a.key], a.at)
		}
	}
	var idle time.Duration
	most := 0
	for _, k := range l.sc.Keys {
		ats := admitted[k]
		slices.Sort(ats)
		i, n := longestIdle(spans[k], ats), mostInASecond(ats)
		f["max_key_idle_s_"+k], f["max_admissions_per_second_"+k] = i.Seconds(), float64(n)
		idle, most = max(idle, i), max(most, n)
	}
	f["max_key_idle_s"], f["max_admissions_per_second"] = idle.Seconds(), float64(most)
	stayed, turns := stayedOnKey(l.requests)
	f["turns_with_a_previous_turn"] = float64(turns)
	if turns > 0 {
		f["stayed_on_key_share"] = float64(stayed) / float64(turns)
	}
}

// waitMarks are the marks of the turns' waits, by session and time.
// Paced, a rate_limit_wait opens a wait for its key and the session's
// next request (the grant) closes it; at the same time the wait comes
// first. Otherwise a request opens a wait for its key and the answer of
// the prompt closes it; at the same time the answer comes first (the
// next prompt's request follows it).
func (l *rlKeyLog) waitMarks() []rlMark {
	var marks []rlMark
	if l.paced {
		for _, w := range l.waits {
			marks = append(marks, rlMark(w))
		}
		for _, r := range l.requests {
			marks = append(marks, rlMark{r.at, r.session, ""})
		}
	} else {
		for i, p := range l.prompts {
			if p.ended {
				marks = append(marks, rlMark{p.end, i / l.sc.Prompts, ""})
			}
		}
		for _, r := range l.requests {
			marks = append(marks, rlMark{r.at, r.session, r.key})
		}
	}
	slices.SortStableFunc(marks, func(a, b rlMark) int {
		return cmp.Or(cmp.Compare(a.session, b.session), cmp.Compare(a.at, b.at))
	})
	return marks
}

// waitSpans are the stretches each key was waited for, by key, from
// marks sorted by session and time: a session waits for a key from the
// mark that opens it to the next mark that closes it or names another
// key; a wait still open at the session's last mark ends at end.
func waitSpans(marks []rlMark, end time.Duration) map[string][]span {
	out := map[string][]span{}
	cur := rlMark{session: -1}
	flush := func(to time.Duration) {
		if cur.key != "" {
			out[cur.key] = append(out[cur.key], span{cur.at, to})
		}
		cur.key = ""
	}
	for _, m := range marks {
		if m.session != cur.session {
			flush(end)
			cur.session = m.session
		}
		if m.key != "" && m.key == cur.key {
			continue // still waiting for that key
		}
		flush(m.at)
		cur.key, cur.at = m.key, m.at
	}
	flush(end)
	return out
}

// longestIdle is the longest stretch during which at least one of spans
// was open and no admission (times sorted) fell: from the start of a
// waiting stretch or an admission within it to the next admission or the
// stretch's end.
func longestIdle(spans []span, admissions []time.Duration) time.Duration {
	type event struct {
		at   time.Duration
		kind int // 0: a span opens, 1: an admission, 2: a span closes
	}
	evs := make([]event, 0, 2*len(spans)+len(admissions))
	for _, s := range spans {
		evs = append(evs, event{s.from, 0}, event{s.to, 2})
	}
	for _, a := range admissions {
		evs = append(evs, event{a, 1})
	}
	slices.SortFunc(evs, func(a, b event) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.kind, b.kind)) })
	var open int
	var since, longest time.Duration
	for _, e := range evs {
		switch e.kind {
		case 0:
			if open == 0 {
				since = e.at
			}
			open++
		case 1:
			if open > 0 {
				longest = max(longest, e.at-since)
			}
			since = e.at
		case 2:
			if open--; open == 0 {
				longest = max(longest, e.at-since)
			}
		}
	}
	return longest
}

// mostInASecond is the most of times (sorted) within any one second
// [t, t + 1 s).
func mostInASecond(times []time.Duration) int {
	most, i := 0, 0
	for j, t := range times {
		for t-times[i] >= time.Second {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}

// stayedOnKey counts the requests that had an earlier one of their
// session (turns), and of those the ones sent on the same key as the
// session's request just before (stayed).
func stayedOnKey(requests []rlRequest) (stayed, turns int) {
	rs := slices.Clone(requests)
	slices.SortStableFunc(rs, func(a, b rlRequest) int {
		return cmp.Or(cmp.Compare(a.session, b.session), cmp.Compare(a.at, b.at))
	})
	for i := 1; i < len(rs); i++ {
		if rs[i].session != rs[i-1].session {
			continue
		}
		turns++
		if rs[i].key == rs[i-1].key {
			stayed++
		}
	}
	return stayed, turns
}
