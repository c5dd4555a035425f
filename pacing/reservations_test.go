package pacing

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/provider/ratelimit"
)

// A step of a script on Reservations: what is done, so long after t0,
// and what it says (the decision, then the turns it granted, each with
// where its grant goes).
type step struct {
	after time.Duration
	do    func(r *Reservations[string], now time.Time) string
	want  string
}

// turnOption sets something of a turn.
type turnOption func(*Turn[string])

// turn is session's turn of ticket: normal priority, no key yet, one
// request and no tokens; its grant goes to "inbox-" + session.
func turn(session string, ticket uint64, opts ...turnOption) Turn[string] {
	t := Turn[string]{Session: session, Ticket: ticket, Model: "m", Need: Need{Bounded: true}, To: "inbox-" + session}
	for _, o := range opts {
		o(&t)
	}
	return t
}

func priority(p Priority) turnOption   { return func(t *Turn[string]) { t.Priority = p } }
func prefer(key string) turnOption     { return func(t *Turn[string]) { t.Prefer = key } }
func needs(n Need) turnOption          { return func(t *Turn[string]) { t.Need = n } }
func used(u Usage) func(*Settlement)   { return func(s *Settlement) { s.Used = u } }
func cached(n int64) func(*Settlement) { return func(s *Settlement) { s.CachedInput = n } }
func sent(in, out int64) Usage         { return Usage{Sent: true, Input: in, Output: out} }
func requestsLeft(n int64) ratelimit.Limit {
	return ratelimit.Limit{Limit: 60, Remaining: n, Reset: t0.Add(time.Minute), HasLimit: true, HasRemaining: true}
}

func reserve(t Turn[string]) func(*Reservations[string], time.Time) string {
	return func(r *Reservations[string], now time.Time) string {
		d, paced, released := r.Reserve(now, t)
		var said string
		switch {
		case !paced:
			said = "unpaced"
		case d.TooLarge.Limit > 0:
			said = fmt.Sprintf("too large: %d %s, %s holds %d", d.TooLarge.Need, d.TooLarge.Kind, d.Credential, d.TooLarge.Limit)
		case d.Wait > 0:
			said = fmt.Sprintf("waits %v for %s on %s", d.Wait, d.Limit, d.Credential)
		default:
			said = "granted " + d.Credential
			if d.Switched {
				said += " (switched)"
			}
		}
		return strings.Join(append([]string{said}, granted(released)...), "; ")
	}
}

// settle settles session's turn of ticket on key A, unsent unless used
// says otherwise.
func settle(session string, ticket uint64, opts ...func(*Settlement)) func(*Reservations[string], time.Time) string {
	return func(r *Reservations[string], now time.Time) string {
		s := Settlement{Session: session, Ticket: ticket, Credential: "A"}
		for _, o := range opts {
			o(&s)
		}
		return strings.Join(granted(r.Settle(now, s)), "; ")
	}
}

func cancel(session string, ticket uint64) func(*Reservations[string], time.Time) string {
	return func(r *Reservations[string], now time.Time) string {
		return strings.Join(granted(r.Cancel(now, session, ticket)), "; ")
	}
}

// observe takes headers on key A, for session's turn, that say n
// requests remain of 60.
func observe(session string, n int64) func(*Reservations[string], time.Time) string {
	return func(r *Reservations[string], now time.Time) string {
		var s ratelimit.Snapshot
		s.Set(ratelimit.Requests, requestsLeft(n))
		return strings.Join(granted(r.Observe(now, "A", session, now, s)), "; ")
	}
}

func release(r *Reservations[string], now time.Time) string {
	return strings.Join(granted(r.Release(now)), "; ")
}

func waiting(r *Reservations[string], _ time.Time) string {
	return fmt.Sprintf("%d waiting", r.Waiting())
}

func next(r *Reservations[string], now time.Time) string {
	at, ok := r.NextRelease(now)
	if !ok {
		return "no release"
	}
	return fmt.Sprintf("next release in %v", at.Sub(now))
}

// levels is what key A has left of each limit known.
func levels(r *Reservations[string], now time.Time) string {
	var out []string
	for _, l := range r.Pacer().Levels(now) {
		if l.Credential == "A" {
			out = append(out, fmt.Sprintf("%s %g", l.Kind, l.Remaining))
		}
	}
	return strings.Join(out, ", ")
}

func granted(gs []Granted[string]) []string {
	var out []string
	for _, g := range gs {
		s := fmt.Sprintf("%s#%d granted %s to %s", g.ID, g.Ticket, g.Credential, g.To)
		if g.Switched {
			s = fmt.Sprintf("%s#%d granted %s (switched) to %s", g.ID, g.Ticket, g.Credential, g.To)
		}
		out = append(out, s)
	}
	return out
}

func TestReservations(t *testing.T) {
	oneRPM := Limits{RPM: 1}
	tokens := Limits{RPM: 100, TPM: 10_000}
	tests := []struct {
		name   string
		keys   []string
		limits Limits // each key's
		script []step
	}{
		{"a granted turn that cancels gives back what it reserved, and the waiting turn goes", []string{"A"}, oneRPM, []step{
			{0, reserve(turn("s1", 1)), "granted A"},
			{0, reserve(turn("s2", 1)), "waits 1m0s for requests on A"},
			{time.Second, cancel("s1", 1), "s2#1 granted A to inbox-s2"},
		}},
		{"a cancel of another ticket drops nothing; ticket 0 drops any", []string{"A"}, oneRPM, []step{
			{0, reserve(turn("s1", 1)), "granted A"},
			{0, reserve(turn("s2", 1)), "waits 1m0s for requests on A"},
			{0, cancel("s1", 2), ""},
			{0, cancel("s1", 0), "s2#1 granted A to inbox-s2"},
		}},
		{"a waiting turn that cancels leaves the queue", []string{"A"}, oneRPM, []step{
			{0, reserve(turn("s1", 1)), "granted A"},
			{0, reserve(turn("s2", 1)), "waits 1m0s for requests on A"},
			{0, cancel("s2", 1), ""},
			{0, waiting, "0 waiting"},
			{0, next, "no release"},
			{0, cancel("s1", 1), ""},
		}},
		{"a settle of another ticket settles nothing", []string{"A"}, oneRPM, []step{
			{0, reserve(turn("s1", 1)), "granted A"},
			{0, reserve(turn("s2", 1)), "waits 1m0s for requests on A"},
			{0, settle("s1", 2), ""},
			{0, settle("s1", 1), "s2#1 granted A to inbox-s2"}, // never sent: its request back
		}},
		{"a turn still waiting settles nothing", []string{"A"}, oneRPM, []step{
			{0, reserve(turn("s1", 1)), "granted A"},
			{0, reserve(turn("s2", 1)), "waits 1m0s for requests on A"},
			{0, settle("s2", 1, used(sent(10, 5))), ""},
			{0, waiting, "1 waiting"},
		}},
		{"a session's new turn drops the one it left unsettled first, and what that frees goes to the turns waiting", []string{"A"}, oneRPM, []step{
			{0, reserve(turn("s1", 1)), "granted A"},
			{0, reserve(turn("s2", 1)), "waits 1m0s for requests on A"},
			{0, reserve(turn("s1", 2)), "waits 1m0s for requests on A; s2#1 granted A to inbox-s2"},
		}},
		{"waiting turns go by priority, each grant to its turn", []string{"A"}, oneRPM, []step{
			{0, reserve(turn("s1", 1)), "granted A"},
			{0, reserve(turn("low", 7, priority(Low))), "waits 1m0s for requests on A"},
			{0, reserve(turn("high", 3, priority(High))), "waits 1m0s for requests on A"},
			{0, next, "next release in 1m0s"},
			{time.Minute, release, "high#3 granted A to inbox-high"},
			{2 * time.Minute, release, "low#7 granted A to inbox-low"},
			{2 * time.Minute, waiting, "0 waiting"},
		}},
		{"a turn granted from the queue holds its reservation until its settle or cancel", []string{"A"}, oneRPM, []step{
			{0, reserve(turn("s1", 1)), "granted A"},
			{0, reserve(turn("s2", 4)), "waits 1m0s for requests on A"},
			{0, reserve(turn("s3", 1)), "waits 2m0s for requests on A"},
			{time.Minute, release, "s2#4 granted A to inbox-s2"},
			{time.Minute, cancel("s2", 3), ""},
			{time.Minute, cancel("s2", 4), "s3#1 granted A to inbox-s3"},
		}},
		{"a turn granted on another key than its session's says so", []string{"A", "B"}, oneRPM, []step{
			{0, reserve(turn("s1", 1, prefer("A"))), "granted A"},
			{0, reserve(turn("s2", 1, prefer("B"))), "granted B"},
			{0, reserve(turn("s3", 1, prefer("A"))), "waits 1m0s for requests on A"},
			{0, cancel("s2", 1), "s3#1 granted B (switched) to inbox-s3"},
		}},
		{"a cold key lets its probe out and holds the rest until the probe's headers arrive", []string{"A"}, Limits{}, []step{
			{0, reserve(turn("s1", 1)), "granted A"},
			{0, reserve(turn("s2", 1)), "waits 1s for requests on A"},
			{100 * time.Millisecond, observe("s1", 58), "s2#1 granted A to inbox-s2"},
		}},
		{"a key whose probe is answered without headers is never held", []string{"A"}, Limits{}, []step{
			{0, reserve(turn("s1", 1)), "granted A"},
			{time.Second, settle("s1", 1, used(sent(10, 5))), ""},
			{time.Second, reserve(turn("s2", 1)), "unpaced"},
			{time.Second, reserve(turn("s3", 1)), "unpaced"},
		}},
		{"a turn too large for every key holds nothing", []string{"A"}, Limits{TPM: 1000}, []step{
			{0, reserve(turn("s1", 1, prefer("A"), needs(Need{Input: 2000, Bounded: true}))), "too large: 2000 tokens, A holds 1000"},
			{0, levels, "tokens 1000"},
			{0, waiting, "0 waiting"},
		}},
		{"a turn without max_tokens reserves what its model's answers use", []string{"A"}, tokens, []step{
			{0, reserve(turn("s1", 1, needs(Need{Input: 100}))), "granted A"},
			{0, levels, "requests 99, tokens 8876"}, // DefaultOutputEstimate until one answered
			{0, settle("s1", 1, used(sent(100, 30))), ""},
			{0, levels, "requests 99, tokens 9870"},
			{0, reserve(turn("s2", 1, needs(Need{Input: 100}))), "granted A"},
			{0, levels, "requests 98, tokens 9740"},
		}},
		{"a turn with max_tokens reserves them, and its answer teaches no estimate", []string{"A"}, tokens, []step{
			{0, reserve(turn("s1", 1, needs(Need{Output: 256, Bounded: true}))), "granted A"},
			{0, settle("s1", 1, used(sent(0, 30))), ""},
			{0, levels, "requests 99, tokens 9744"}, // OpenAI keeps the bound
			{0, reserve(turn("s2", 1, needs(Need{}))), "granted A"},
			{0, levels, "requests 98, tokens 8720"},
		}},
		{"a turn's input is scaled as the provider counts its model's, cached input included", []string{"A"}, tokens, []step{
			{0, reserve(turn("s1", 1, needs(Need{Input: 100, Bounded: true}))), "granted A"},
			{0, settle("s1", 1, used(sent(150, 0)), cached(50)), ""},
			{0, levels, "requests 99, tokens 9850"},
			{0, reserve(turn("s2", 1, needs(Need{Input: 100, Bounded: true}))), "granted A"},
			{0, levels, "requests 98, tokens 9650"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limits := map[string]Limits{}
			for _, k := range tt.keys {
				limits[k] = tt.limits
			}
			r := NewReservations[string](tt.keys, limits, t0, Options{Window: time.Minute})
			for i, s := range tt.script {
				if got := s.do(r, t0.Add(s.after)); got != s.want {
					t.Errorf("step %d at +%v: got %q, want %q", i+1, s.after, got, s.want)
				}
			}
		})
	}
}
