package retrytally

import (
	"testing"

	"github.com/musepi/musepi"
)

var (
	prompt    = musepi.AgentStart{User: &musepi.UserMessage{}} // the prompt's first call
	retryCall = musepi.AgentStart{}                            // a retry's call goes out
)

func retryStart(n int) musepi.AutoRetryStart {
	return musepi.AutoRetryStart{Attempt: n, MaxAttempts: 10, ErrorClass: "transient"}
}

// Each script is the events of one prompt as a session emits them; the
// tally counts a retry once its call went out, whatever auto_retry_end's
// attempt says.
func TestTally(t *testing.T) {
	cases := []struct {
		name        string
		events      []musepi.Event
		made, ended int
	}{
		{"success after 1 retry", []musepi.Event{prompt, retryStart(1), retryCall,
			musepi.AutoRetryEnd{Success: true, Attempt: 1}}, 1, 1},
		{"give-up with maxRetries 0", []musepi.Event{prompt,
			musepi.AutoRetryEnd{Attempt: 0, FinalError: "503"}}, 0, 0},
		{"a first wait over retry.maxDelayMs", []musepi.Event{prompt,
			musepi.AutoRetryEnd{Attempt: 1, FinalError: "provider asked for 600000 ms"}}, 0, 0},
		{"a wait over retry.maxDelayMs after retry 1", []musepi.Event{prompt, retryStart(1), retryCall,
			musepi.AutoRetryEnd{Attempt: 2, FinalError: "provider asked for 600000 ms"}}, 1, 1},
		{"give up after 2 retries (maxRetries 2)", []musepi.Event{prompt, retryStart(1), retryCall, retryStart(2), retryCall,
			musepi.AutoRetryEnd{Attempt: 2, FinalError: "503"}}, 2, 2},
		{"retry 3/10 cancelled in its backoff", []musepi.Event{prompt, retryStart(1), retryCall, retryStart(2), retryCall, retryStart(3),
			musepi.AutoRetryEnd{Attempt: 3, FinalError: "Retry cancelled"}}, 2, 2},
		{"retry 3/10 still pending", []musepi.Event{prompt, retryStart(1), retryCall, retryStart(2), retryCall, retryStart(3)}, 2, 0},
		{"two chains of one retry (a tool loop)", []musepi.Event{prompt, retryStart(1), retryCall,
			musepi.AutoRetryEnd{Success: true, Attempt: 1}, retryStart(1), retryCall, musepi.AutoRetryEnd{Success: true, Attempt: 1}}, 2, 1},
		{"a new prompt after a cancelled retry", []musepi.Event{prompt, retryStart(1),
			musepi.AutoRetryEnd{Attempt: 1, FinalError: "Retry cancelled"}, prompt}, 0, 0},
		{"a prompt's call is no retry's", []musepi.Event{prompt, retryStart(1), prompt}, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var tally Tally
			for _, ev := range tc.events {
				tally.Add(ev)
			}
			if tally.Made() != tc.made || tally.Ended() != tc.ended {
				t.Errorf("made %d, ended %d; want %d and %d", tally.Made(), tally.Ended(), tc.made, tc.ended)
			}
		})
	}
}
