package retry

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// Spec section 4: nominal backoff with defaults is 500, 1000, 2000, 4000 ms,
// then 8000 ms for attempt 5 and later; attempt numbers never overflow.
func TestNominalBackoffDefaults(t *testing.T) {
	base := DefaultSettings().BaseDelay
	tests := []struct {
		attempt int
		base    time.Duration
		want    time.Duration
	}{
		{1, base, 500 * time.Millisecond},
		{2, base, 1000 * time.Millisecond},
		{3, base, 2000 * time.Millisecond},
		{4, base, 4000 * time.Millisecond},
		{5, base, 8000 * time.Millisecond},
		// Later attempts stay at the 8 s cap, never overflowing.
		{6, base, 8 * time.Second},
		{10, base, 8 * time.Second},
		{63, base, 8 * time.Second},
		{64, base, 8 * time.Second},
		{65, base, 8 * time.Second},
		{1000, base, 8 * time.Second},
		{math.MaxInt, base, 8 * time.Second},
		// Attempt 0 and negative attempts count as attempt 1.
		{0, base, 500 * time.Millisecond},
		{-1, base, 500 * time.Millisecond},
		{math.MinInt, base, 500 * time.Millisecond},
		// A non-positive base gives 0.
		{1, 0, 0},
		{5, 0, 0},
		{math.MaxInt, 0, 0},
		{3, -time.Second, 0},
		{1, time.Duration(math.MinInt64), 0},
		// A base above 8 s is capped at 8 s.
		{1, 9 * time.Second, 8 * time.Second},
		{1, 8 * time.Second, 8 * time.Second},
		{3, time.Hour, 8 * time.Second},
		{1, time.Duration(math.MaxInt64), 8 * time.Second},
		// Other bases double the same way up to the cap.
		{1, time.Second, time.Second},
		{4, time.Second, 8 * time.Second},
		{2, 3 * time.Second, 6 * time.Second},
		{3, 3 * time.Second, 8 * time.Second},
		{1, time.Nanosecond, time.Nanosecond},
		{11, time.Nanosecond, 1024 * time.Nanosecond},
		{math.MaxInt, time.Nanosecond, 8 * time.Second},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.attempt)+"/"+tt.base.String(), func(t *testing.T) {
			if got := NominalBackoff(tt.attempt, tt.base); got != tt.want {
				t.Errorf("NominalBackoff(%d, %v) = %v; want %v", tt.attempt, tt.base, got, tt.want)
			}
		})
	}
	if MaxBackoff != 8*time.Second {
		t.Errorf("MaxBackoff = %v; want 8s", MaxBackoff)
	}
}

// Spec section 4: the real sleep is 75-100 % of the nominal backoff.
func TestJitterFactorExactPoints(t *testing.T) {
	tests := []struct {
		name string
		r    float64
		want float64
	}{
		{"r=0", 0, 0.75},
		{"r=0.25", 0.25, 0.8125},
		{"r=0.5", 0.5, 0.875},
		{"r=1", 1, 1.0},
		{"NaN clamps to 0", math.NaN(), 0.75},
		{"negative clamps to 0", -0.5, 0.75},
		{"-Inf clamps to 0", math.Inf(-1), 0.75},
		{"negative zero", math.Copysign(0, -1), 0.75},
		{"above 1 clamps to 1", 1.5, 1.0},
		{"+Inf clamps to 1", math.Inf(1), 1.0},
		{"MaxFloat64 clamps to 1", math.MaxFloat64, 1.0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := JitterFactor(tt.r); got != tt.want {
				t.Errorf("JitterFactor(%v) = %v; want %v", tt.r, got, tt.want)
			}
		})
	}
	if got := JitterFactor(math.Nextafter(1, 0)); got < 0.99999 || got > 1 {
		t.Errorf("JitterFactor(1-ε) = %v; want just under 1.0", got)
	}
}

// Backoff is the nominal value times the jitter factor.
func TestBackoffExactPoints(t *testing.T) {
	base := 500 * time.Millisecond
	tests := []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{1, 0, 375 * time.Millisecond},
		{1, 0.5, 437500 * time.Microsecond},
		{1, 1, 500 * time.Millisecond},
		{2, 0, 750 * time.Millisecond},
		{3, 1, 2 * time.Second},
		{5, 0, 6 * time.Second},
		{5, 0.5, 7 * time.Second},
		{5, 1, 8 * time.Second},
		{math.MaxInt, math.NaN(), 6 * time.Second},
		{math.MaxInt, 2, 8 * time.Second},
		{0, -1, 375 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := Backoff(tt.attempt, base, tt.r); got != tt.want {
			t.Errorf("Backoff(%d, %v, %v) = %v; want %v", tt.attempt, base, tt.r, got, tt.want)
		}
	}
	if got := Backoff(3, 0, 0.5); got != 0 {
		t.Errorf("Backoff(3, 0, 0.5) = %v; want 0", got)
	}
}

// Jittered delays stay within [0.75, 1.0] x nominal, average 0.875 x nominal
// and spread over the whole range, so concurrent sessions do not retry in
// lockstep.
func TestBackoffJitterBounds(t *testing.T) {
	const samples = 10000
	base := DefaultSettings().BaseDelay
	for attempt := 1; attempt <= 8; attempt++ {
		t.Run("attempt "+strconv.Itoa(attempt), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(42, uint64(attempt)))
			nominal := NominalBackoff(attempt, base)
			lo := time.Duration(0.75 * float64(nominal))
			minD, maxD := time.Duration(math.MaxInt64), time.Duration(0)
			var sum float64
			for range samples {
				d := Backoff(attempt, base, rng.Float64())
				if d < lo || d > nominal {
					t.Fatalf("Backoff(%d) = %v; want within [%v, %v]", attempt, d, lo, nominal)
				}
				minD, maxD = min(minD, d), max(maxD, d)
				sum += float64(d)
			}
			mean := sum / samples
			if want := 0.875 * float64(nominal); math.Abs(mean-want) > 0.01*want {
				t.Errorf("mean Backoff(%d) = %v; want within 1%% of %v", attempt, time.Duration(mean), time.Duration(want))
			}
			if float64(minD) >= 0.76*float64(nominal) {
				t.Errorf("min Backoff(%d) = %v; want below 0.76 x %v", attempt, minD, nominal)
			}
			if float64(maxD) <= 0.99*float64(nominal) {
				t.Errorf("max Backoff(%d) = %v; want above 0.99 x %v", attempt, maxD, nominal)
			}
		})
	}
}

func FuzzBackoff(f *testing.F) {
	for _, s := range []struct {
		attempt int
		base    int64
		r       float64
	}{
		{1, int64(500 * time.Millisecond), 0},
		{5, int64(500 * time.Millisecond), 0.5},
		{64, int64(500 * time.Millisecond), 1},
		{math.MaxInt, int64(time.Nanosecond), 0.999},
		{math.MinInt, math.MaxInt64, math.NaN()},
		{0, 0, math.Inf(1)},
		{-1, -1, math.Inf(-1)},
		{3, math.MinInt64, -0.5},
		{2, int64(9 * time.Second), 1e300},
	} {
		f.Add(s.attempt, s.base, s.r)
	}
	f.Fuzz(func(t *testing.T, attempt int, base int64, r float64) {
		nominal := NominalBackoff(attempt, time.Duration(base))
		if nominal < 0 || nominal > MaxBackoff {
			t.Fatalf("NominalBackoff(%d, %d) = %v; want within [0, 8s]", attempt, base, nominal)
		}
		if (base > 0) != (nominal > 0) {
			t.Fatalf("NominalBackoff(%d, %d) = %v; want positive exactly when base is", attempt, base, nominal)
		}
		d := Backoff(attempt, time.Duration(base), r)
		if d < 0 || d > MaxBackoff {
			t.Fatalf("Backoff(%d, %d, %v) = %v; want within [0, 8s]", attempt, base, r, d)
		}
		if d > nominal || float64(d) < 0.75*float64(nominal)-1 {
			t.Fatalf("Backoff(%d, %d, %v) = %v; want within [0.75, 1] x %v", attempt, base, r, d, nominal)
		}
		if j := JitterFactor(r); !(j >= 0.75 && j <= 1) {
			t.Fatalf("JitterFactor(%v) = %v; want within [0.75, 1]", r, j)
		}
	})
}
