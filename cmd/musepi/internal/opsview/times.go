package opsview

import (
	"fmt"
	"time"
)

// stamp is t in UTC to the millisecond, "-" for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// relative says how far t is from now: "in 2.1s", "3m4s ago".
func relative(t, now time.Time) string {
	d := t.Sub(now)
	ago := d < 0
	if ago {
		d = -d
	}
	if d < time.Minute {
		d = d.Round(100 * time.Millisecond)
	} else {
		d = d.Round(time.Second)
	}
	if ago {
		return fmt.Sprintf("%s ago", d)
	}
	return fmt.Sprintf("in %s", d)
}
