package retry

import "time"

// NominalBackoff is the local backoff of attempt (1-based) before jitter:
// min(base * 2^(attempt-1), MaxBackoff). With the default base of 500 ms:
//
//	attempt  1       2        3        4        5+
//	nominal  500 ms  1000 ms  2000 ms  4000 ms  8000 ms
//
// Attempts below 1 count as 1; a non-positive base gives 0. It never
// overflows, however large attempt is.
func NominalBackoff(attempt int, base time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	if base >= MaxBackoff {
		return MaxBackoff
	}
	d := base
	for i := 1; i < attempt; i++ {
		d *= 2
		if d >= MaxBackoff {
			return MaxBackoff
		}
	}
	return d
}

// JitterFactor maps a uniform random number r in [0, 1) to the jitter
// factor in [0.75, 1.0]; r outside [0, 1] (or NaN) is clamped.
func JitterFactor(r float64) float64 {
	if !(r >= 0) {
		r = 0
	}
	if r > 1 {
		r = 1
	}
	return 0.75 + 0.25*r
}

// Backoff is the jittered local backoff: NominalBackoff scaled by
// JitterFactor(r), so 75-100 % of the nominal value.
func Backoff(attempt int, base time.Duration, r float64) time.Duration {
	return time.Duration(float64(NominalBackoff(attempt, base)) * JitterFactor(r))
}
