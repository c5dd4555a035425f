package actors

import (
	"reflect"
	"testing"
)

// Every field of a session actor is kept while the session sleeps
// (passivated: asleep), or is rebuilt by its next actor, or is empty at
// rest: a new field must say which.
func TestAsleepKeepsTheActor(t *testing.T) {
	notKept := map[string]string{
		"deps":     "the runtime's, given to every actor",
		"entry":    "the session's PreparedSession, found under its name at start",
		"cfg":      "the session's configuration, from its PreparedSession",
		"pending":  "the inputs of the step running",
		"panicked": "set as the actor panics, which restarts it",
	}
	st := reflect.TypeFor[SessionActor]()
	for i := range st.NumField() {
		f := st.Field(i)
		if f.Anonymous && f.Type == reflect.TypeFor[asleep]() {
			continue // kept
		}
		if notKept[f.Name] == "" {
			t.Errorf("SessionActor.%s is neither kept asleep nor listed as rebuilt or empty at rest", f.Name)
		}
	}
}
