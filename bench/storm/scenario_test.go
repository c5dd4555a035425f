package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/retry"
)

// defaultMix is the -mix flag's default.
const defaultMix = "429=30,429-hint=10,503=40,overload=20"

func TestParseMix(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    string   // kinds and weights, "name=w,..." (when no error)
		errHas  []string // substrings of the error (when one is expected)
		wantErr bool
	}{
		{name: "two kinds", in: "429=30,503=70", want: "429=30,503=70"},
		{name: "default", in: defaultMix, want: defaultMix},
		{name: "spaces around parts", in: " 429=1 , overload=2 ", want: "429=1,overload=2"},
		{name: "zero weight dropped", in: "429=0,503=5", want: "503=5"},
		{name: "unknown kind", in: "429=30,529=70", wantErr: true, errHas: []string{`"529=70"`, "kind=weight", "429-hint"}},
		{name: "missing '='", in: "429", wantErr: true, errHas: []string{`"429"`, "kind=weight"}},
		{name: "empty", in: "", wantErr: true, errHas: []string{"kind=weight"}},
		{name: "negative weight", in: "503=-1", wantErr: true, errHas: []string{"weight of 503", `"-1"`, "≥ 0"}},
		{name: "non-numeric weight", in: "429=lots", wantErr: true, errHas: []string{"weight of 429", `"lots"`, "whole number"}},
		{name: "fractional weight", in: "429=1.5", wantErr: true, errHas: []string{"weight of 429", `"1.5"`}},
		{name: "all zero", in: "429=0,503=0", wantErr: true, errHas: []string{"no kind has a positive weight"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mix, err := parseMix(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parseMix(%q) = %v, want an error", tc.in, mix)
				}
				if !strings.HasPrefix(err.Error(), "-mix: ") {
					t.Errorf("error %q does not name the flag", err)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("parseMix(%q): %v", tc.in, err)
			}
			if got := mixString(mix); got != tc.want {
				t.Errorf("parseMix(%q) = %s, want %s", tc.in, got, tc.want)
			}
			for _, w := range mix {
				if w.kind.name == "" || w.kind.preset == "" || w.kind.status == 0 || w.kind.text == "" {
					t.Errorf("kind %+v is not fully described", w.kind)
				}
			}
		})
	}
}

// mixString writes mix as parseMix reads it.
func mixString(mix []weighted) string {
	parts := make([]string, len(mix))
	for i, w := range mix {
		parts[i] = w.kind.name + "=" + strconv.Itoa(w.weight)
	}
	return strings.Join(parts, ",")
}

func TestKindOf(t *testing.T) {
	for _, mix := range []string{"429=30,503=70", defaultMix, "overload=1", "429=1,429-hint=2,503=3,overload=4", "503=7,429=0,429-hint=5"} {
		t.Run(mix, func(t *testing.T) {
			sc := testScenario(t, time.Second, mix)
			total := 0
			want := map[string]int{}
			for _, w := range sc.Mix {
				total += w.weight
				want[w.kind.name] = w.weight
			}
			// Any window of total consecutive sessions, wherever it starts.
			for _, from := range []int{0, 1, total / 3, total - 1, total, 7*total + 5, 1_000_003} {
				got := map[string]int{}
				for i := from; i < from+total; i++ {
					got[sc.kindOf(i).name]++
				}
				if len(got) != len(want) {
					t.Errorf("window from %d: kinds %v, want %v", from, got, want)
					continue
				}
				for k, n := range want {
					if got[k] != n {
						t.Errorf("window from %d: %s dealt %d times, want %d (all %v)", from, k, got[k], n, got)
					}
				}
			}
			// Every session's kind is one of the mix, and the deal repeats.
			for i := range 3 * total {
				if a, b := sc.kindOf(i), sc.kindOf(i+total); a.name != b.name {
					t.Fatalf("kindOf(%d) = %s, kindOf(%d) = %s: not periodic", i, a.name, i+total, b.name)
				}
			}
		})
	}
}

func TestOutcome(t *testing.T) {
	const (
		start  = 2 * time.Second
		length = 10 * time.Second
	)
	now := time.Unix(1000, 0)
	for _, usage := range []bool{false, true} {
		mix, err := parseMix(defaultMix)
		if err != nil {
			t.Fatal(err)
		}
		sc := &Scenario{OutageStart: start, OutageLen: length, Mix: mix, UsageLimit: usage}
		for _, kind := range kindNames() {
			for _, key := range []string{limitedKey, freeKey} {
				for _, tc := range []struct {
					at     time.Duration
					outage bool
				}{
					{0, false},
					{start - time.Millisecond, false},
					{start, true},
					{start + length/2, true},
					{start + length - time.Nanosecond, true},
					{start + length, false},
					{start + length + time.Minute, false},
				} {
					msg := sc.outcome(tc.at, model(errorKinds[kind]), key)
					class := retry.Classify(msg, retry.AbortState{})
					hint, hinted := retry.ParseHint(msg.GetHeaders(), msg.GetErrorMessage(), now)
					limited := usage && key == limitedKey
					switch {
					case !tc.outage:
						if class != retry.Success || msg.GetErrorMessage() != "" {
							t.Errorf("usage %v, %s on %s at %v (outside the outage): class %v, error %q; want success",
								usage, kind, key, tc.at, class, msg.GetErrorMessage())
						}
					case limited:
						if class != retry.UsageLimit {
							t.Errorf("usage %v, %s on %s at %v: class %v (%q), want usage_limit", usage, kind, key, tc.at, class, msg.GetErrorMessage())
						}
						if hinted {
							t.Errorf("usage %v, %s on %s at %v: usage limit has hint %+v", usage, kind, key, tc.at, hint)
						}
					default:
						if class != retry.Transient {
							t.Errorf("usage %v, %s on %s at %v: class %v (%q, status %d), want transient",
								usage, kind, key, tc.at, class, msg.GetErrorMessage(), msg.GetHttpStatus())
						}
						if got := int(msg.GetHttpStatus()); got != errorKinds[kind].status {
							t.Errorf("%s: status %d, want %d", kind, got, errorKinds[kind].status)
						}
						switch {
						case kind == "429-hint" && (!hinted || hint.Delay != 2*time.Second):
							t.Errorf("429-hint at %v: hint %+v (found %v), want 2s", tc.at, hint, hinted)
						case kind != "429-hint" && hinted:
							t.Errorf("%s at %v: unexpected hint %+v", kind, tc.at, hint)
						}
					}
				}
			}
		}
	}
}

// Every kind's message as the harness writes it classifies as the family
// the kind stands for, whatever model the session asked for.
func TestErrorKindsClassify(t *testing.T) {
	for name, k := range errorKinds {
		if k.name != name {
			t.Errorf("errorKinds[%q].name = %q", name, k.name)
		}
		if model(k) != "m-"+name {
			t.Errorf("model(%s) = %q", name, model(k))
		}
	}
	msg := (&Scenario{OutageLen: time.Second, UsageLimit: true}).outcome(0, "m-unknown", limitedKey)
	if c := retry.Classify(msg, retry.AbortState{}); c != retry.UsageLimit {
		t.Errorf("usage limit on an unknown model: class %v, want usage_limit", c)
	}
}

func TestScenarioFakeLLM(t *testing.T) {
	for _, tc := range []struct {
		name     string
		start    time.Duration
		length   time.Duration
		mix      string
		usage    bool
		from, to int64
	}{
		{"default, usage limits", 0, 40 * time.Second, defaultMix, true, 0, 40_000},
		{"late start, no usage limits", 1500 * time.Millisecond, 10 * time.Second, "429=30,503=70", false, 1500, 11_500},
		{"sub-ms outage bounds", 250*time.Millisecond + 900*time.Microsecond, 2 * time.Second, "overload=1", true, 250, 2250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := testScenario(t, tc.length, tc.mix)
			sc.OutageStart, sc.UsageLimit = tc.start, tc.usage
			fs := sc.fakellm()
			if err := fs.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			// The child process reads it back through LoadScenario.
			data, err := json.Marshal(fs)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fakellm.ParseScenario(data); err != nil {
				t.Fatalf("ParseScenario of the marshalled scenario: %v\n%s", err, data)
			}
			if fs.Default == nil || fs.Default.Text == "" || fs.Default.Preset != "" {
				t.Errorf("default = %+v, want a text stream", fs.Default)
			}
			rules := fs.Rules
			wantRules := len(sc.Mix)
			if tc.usage {
				wantRules++
			}
			if len(rules) != wantRules {
				t.Fatalf("%d rules, want %d: %+v", len(rules), wantRules, rules)
			}
			for i, r := range rules {
				if r.Match.FromMs != tc.from || r.Match.ToMs != tc.to {
					t.Errorf("rules[%d] window [%d, %d) ms, want [%d, %d)", i, r.Match.FromMs, r.Match.ToMs, tc.from, tc.to)
				}
			}
			if tc.usage {
				u := rules[0]
				if u.Name != usageLimit.name || u.Match.Key != limitedKey || u.Match.Model != "" || u.Respond.Preset != usageLimit.preset {
					t.Errorf("rules[0] = %+v, want the usage limit on %s for every model", u, limitedKey)
				}
				rules = rules[1:]
			}
			for i, w := range sc.Mix {
				r := rules[i]
				if r.Name != w.kind.name || r.Match.Model != model(w.kind) || r.Match.Key != "" ||
					r.Respond.Preset != w.kind.preset || !sameHeaders(r.Respond.Headers, w.kind.headers) {
					t.Errorf("rule for %s = %+v", w.kind.name, r)
				}
			}
		})
	}
}

func sameHeaders(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestScenarioString(t *testing.T) {
	sc := testScenario(t, 10*time.Second, "429=30,503=70")
	sc.OutageStart = 1500 * time.Millisecond
	s := sc.String()
	for _, want := range []string{"outage 10s", "from 1.5s", "mix 429=30,503=70"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q, want it to contain %q", s, want)
		}
	}
	if strings.Contains(s, limitedKey) {
		t.Errorf("String() = %q mentions usage limits, which are off", s)
	}
	sc.UsageLimit = true
	if s := sc.String(); !strings.Contains(s, "usage limits on "+limitedKey) {
		t.Errorf("String() = %q, want the usage limits on %s", s, limitedKey)
	}
}

func TestScenarioRamp(t *testing.T) {
	tests := []struct {
		name              string
		ramp, outageStart time.Duration
		n                 int
		wantStarts        []time.Duration
		wantInOutage      int
	}{
		{"no ramp: all at once", 0, 0, 4, []time.Duration{0, 0, 0, 0}, 4},
		{"spread evenly", 4 * time.Second, 0, 4, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}, 4},
		{"outage after the first starts", 4 * time.Second, 1500 * time.Millisecond, 4, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}, 2},
		{"one session", time.Second, 0, 1, []time.Duration{0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := &Scenario{OutageStart: tt.outageStart, OutageLen: 10 * time.Second, Ramp: tt.ramp}
			for i, want := range tt.wantStarts {
				if got := sc.startAt(i, tt.n); got != want {
					t.Errorf("startAt(%d, %d) = %v, want %v", i, tt.n, got, want)
				}
			}
			if got := sc.firstAttemptsInOutage(tt.n); got != tt.wantInOutage {
				t.Errorf("firstAttemptsInOutage(%d) = %d, want %d", tt.n, got, tt.wantInOutage)
			}
		})
	}
}

func TestScenarioSampleAt(t *testing.T) {
	tests := []struct {
		name        string
		sc          Scenario
		n           int
		wantAt      time.Duration
		wantSampled int
	}{
		{"no ramp: mid-outage", Scenario{OutageStart: 2 * time.Second, OutageLen: 40 * time.Second}, 10, 22 * time.Second, 10},
		{"ramp over before mid", Scenario{OutageLen: 10 * time.Second, Ramp: 4 * time.Second}, 4, 5 * time.Second, 4},
		{"ramp past mid: the last prompt", Scenario{OutageLen: 10 * time.Second, Ramp: 8 * time.Second}, 4, 6 * time.Second, 4},
		{"ramp as long as the outage: 90 % in", Scenario{OutageLen: 10 * time.Second, Ramp: 10 * time.Second}, 100, 9 * time.Second, 91},
		{"no sessions", Scenario{OutageLen: 10 * time.Second}, 0, 5 * time.Second, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, sampled := tt.sc.sampleAt(tt.n)
			if at != tt.wantAt || sampled != tt.wantSampled {
				t.Errorf("sampleAt(%d) = %v, %d; want %v, %d", tt.n, at, sampled, tt.wantAt, tt.wantSampled)
			}
		})
	}
}

func TestStarter(t *testing.T) {
	vc := clock.NewVirtual(time.Unix(0, 0))
	sc := &Scenario{Ramp: 3 * time.Second}
	var (
		mu      sync.Mutex
		started = map[int]time.Duration{}
	)
	var st starter
	st.launch(vc, sc, 3, func(i int) {
		mu.Lock()
		started[i] = vc.Now().Sub(time.Unix(0, 0))
		mu.Unlock()
	})
	if err := vc.Advance(testCtx(t), 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(started) != 2 || started[0] != 0 || started[1] != time.Second {
		t.Errorf("started by 1.5 s: %v, want sessions 0 at 0s and 1 at 1s", started)
	}
	mu.Unlock()
	if n := st.cancel(); n != 1 {
		t.Errorf("cancel stopped %d starts, want the 1 not made", n)
	}
	if err := vc.RunUntilIdle(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := started[2]; ok {
		t.Error("a cancelled start ran")
	}
}
