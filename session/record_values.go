package session

import (
	"fmt"
	"time"

	"github.com/musepi/musepi/retry"
)

// The conversions of a record's values that its generated wire form
// (record_wire.go) uses.

// stateFromWire reads a State's name; one it does not know fails (a
// record written by a newer program).
func stateFromWire(name string, s *State) error {
	for i, n := range stateNames {
		if n == name {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("session record: unknown state %q", name)
}

// classFromWire reads a retry.Class's name.
func classFromWire(name string, c *retry.Class) error {
	class, ok := retry.ParseClass(name)
	if !ok {
		return fmt.Errorf("session record: unknown error class %q", name)
	}
	*c = class
	return nil
}

// unixNano is t in Unix nanoseconds, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromUnixNano is unixNano's inverse.
func fromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
