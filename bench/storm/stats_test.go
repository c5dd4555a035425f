package main

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestPercentiles(t *testing.T) {
	ms := time.Millisecond
	oneToHundred := make([]time.Duration, 100)
	for i := range oneToHundred {
		oneToHundred[len(oneToHundred)-1-i] = time.Duration(i+1) * ms // descending
	}
	for _, tc := range []struct {
		name          string
		in            []time.Duration
		p50, p99, max time.Duration
	}{
		{"empty", nil, 0, 0, 0},
		{"one", []time.Duration{7 * ms}, 7 * ms, 7 * ms, 7 * ms},
		{"two", []time.Duration{2 * ms, 1 * ms}, 1 * ms, 2 * ms, 2 * ms},
		{"1..100", oneToHundred, 50 * ms, 99 * ms, 100 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := append([]time.Duration(nil), tc.in...)
			p50, p99, max := percentiles(tc.in)
			if p50 != tc.p50 || p99 != tc.p99 || max != tc.max {
				t.Errorf("percentiles = %v, %v, %v; want %v, %v, %v", p50, p99, max, tc.p50, tc.p99, tc.max)
			}
			if !reflect.DeepEqual(before, tc.in) {
				t.Error("percentiles modified its input")
			}
		})
	}
}

func TestLockstepIndex(t *testing.T) {
	window := 125 * time.Millisecond
	spread := make([]time.Duration, 1250)
	for i := range spread {
		spread[i] = 3*time.Second + time.Duration(i)*100*time.Microsecond
	}
	bunched := make([]time.Duration, 1250)
	for i := range bunched {
		bunched[i] = 3*time.Second + 5*time.Millisecond
	}
	for _, tc := range []struct {
		name     string
		times    []time.Duration
		window   time.Duration
		min, max float64
	}{
		{"empty", nil, window, 0, 0},
		{"all in one bucket", bunched, window, 12.5, 12.5},
		{"spread", spread, window, 0.9, 1.1},
		{"window under a bucket", bunched, time.Millisecond, 1, 1},
	} {
		got := lockstepIndex(tc.times, tc.window)
		if got < tc.min-1e-9 || got > tc.max+1e-9 || math.IsNaN(got) {
			t.Errorf("%s: lockstepIndex = %v, want in [%v, %v]", tc.name, got, tc.min, tc.max)
		}
	}
}

func TestRecorder(t *testing.T) {
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	r := newRecorder(start)
	var wg sync.WaitGroup
	for _, ms := range []int{-5, 0, 99, 100, 250, 250, 520} {
		wg.Go(func() { r.request(at(ms)) })
	}
	for _, ms := range []int{150, 410} {
		wg.Go(func() { r.completion(at(ms)) })
	}
	for i := 1; i <= 100; i++ {
		wg.Go(func() { r.lateness(time.Duration(i)*time.Millisecond, i <= 10) })
	}
	wg.Wait()

	want := &Timeline{BucketMs: 100, Requests: []int{3, 1, 2, 0, 0, 1}, Completions: []int{0, 1, 0, 0, 1, 0}}
	if got := r.timeline(100 * time.Millisecond); !reflect.DeepEqual(got, want) {
		t.Errorf("timeline = %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		from, to, want int
	}{
		{-10, 1000, 7},
		{0, 100, 2},
		{100, 250, 1},
		{250, 251, 2},
		{600, 700, 0},
	} {
		if got := r.requestsBetween(at(tc.from), at(tc.to)); got != tc.want {
			t.Errorf("requestsBetween(%d ms, %d ms) = %d, want %d", tc.from, tc.to, got, tc.want)
		}
	}
	ms := time.Millisecond
	all, first := r.latenessFigures()
	if want := [3]time.Duration{50 * ms, 99 * ms, 100 * ms}; all != want {
		t.Errorf("lateness, all = %v, want %v", all, want)
	}
	if want := [3]time.Duration{5 * ms, 10 * ms, 10 * ms}; first != want {
		t.Errorf("lateness, first wave = %v, want %v", first, want)
	}
	if got := r.lastCompletion(); !got.Equal(at(410)) {
		t.Errorf("lastCompletion = %v, want %v", got, at(410))
	}
}

func TestRecorderEmpty(t *testing.T) {
	r := newRecorder(time.Now())
	if tl := r.timeline(time.Second); len(tl.Requests) != 0 || len(tl.Completions) != 0 {
		t.Errorf("timeline = %+v, want no buckets", tl)
	}
	if got := r.lastCompletion(); !got.IsZero() {
		t.Errorf("lastCompletion = %v, want zero", got)
	}
}

func TestProgress(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, tc := range []struct {
		name        string
		total, done int
		want        string
	}{
		{"done", 100000, 100000, "] 100%  100,000/100,000  "},
		{"partial", 100000, 45000, "[##############................]  45%  45,000/100,000  "},
		{"nothing to do", 0, 0, "100%  0/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			p := newProgress(&b, "storm", tc.total)
			p.start()
			for i := 0; i <= tc.done; i += max(1, tc.done/10) {
				p.set(i)
			}
			p.set(tc.done)
			time.Sleep(250 * time.Millisecond) // let it redraw at least once
			p.stop()
			p.stop()
			out := b.String()
			if !strings.HasPrefix(out, "\rstorm [") || !strings.HasSuffix(out, "s\n") {
				t.Errorf("output %q: want \\rstorm [... ending in a newline", out)
			}
			if strings.Count(out, "\n") != 1 {
				t.Errorf("output %q: want exactly one newline", out)
			}
			if last := out[strings.LastIndex(out, "\r"):]; !strings.Contains(last, tc.want) {
				t.Errorf("final line %q: want it to contain %q", last, tc.want)
			}
		})
	}
}
