package actors

import (
	"errors"
	"fmt"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// DefaultMaxResponseBytes bounds the output one turn may stream (4 MiB).
const DefaultMaxResponseBytes = 4 << 20

// errResponseTooLarge is the cause a turn is cancelled with when its output
// passes the session's response size bound.
var errResponseTooLarge = errors.New("response too large")

// tooLarge turns the aborted result of a turn its size bound ended into an
// error that is never retried: it keeps what had streamed within the bound
// and is marked stream_interrupted_after_content (output was produced, so
// the policy does not replay it).
func tooLarge(msg *messages.AssistantMessage, max int) *messages.AssistantMessage {
	return &messages.AssistantMessage{
		Content:      msg.GetContent(),
		StopReason:   messages.StopReason_STOP_REASON_ERROR,
		ErrorMessage: fmt.Sprintf("response too large: the model streamed more than %d bytes in one turn (the session's max response bytes); not retried", max),
		StopDetails:  &messages.StopDetails{Type: retry.StopDetailStreamInterruptedAfterContent},
		Provider:     msg.GetProvider(),
		Model:        msg.GetModel(),
	}
}
