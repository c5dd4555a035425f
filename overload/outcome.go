package overload

import (
	"net/http"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// OutcomeOf is how a call that ended with msg went, for its model's
// limit, by retry's reading of the message: an answer (Answered, its time
// to first token firstToken), an overload answer (retry.ReasonCapacity:
// a 529, a 503, overload wording as a 500's or an overloaded_error inside
// a stream, whatever streamed before it), a time-out, or Neutral: a 429
// and a usage limit (pacing's business), an abort, any other failure.
func OutcomeOf(msg *messages.AssistantMessage, firstToken time.Duration) Outcome {
	var rd retry.Reading
	class := rd.Classify(msg, retry.AbortState{})
	status := int(msg.GetHttpStatus())
	switch {
	case class == retry.Success:
		return Outcome{Result: Answered, FirstToken: firstToken}
	case msg.GetStopReason() != messages.StopReason_STOP_REASON_ERROR, status == http.StatusTooManyRequests,
		class == retry.UsageLimit:
		return Outcome{}
	}
	text := msg.GetErrorMessage()
	if reason, _ := rd.LimitWait(text, status, 0); reason == retry.ReasonCapacity {
		return Outcome{Result: Overloaded}
	}
	if rd.TimedOut(text, status) {
		return Outcome{Result: TimedOut}
	}
	return Outcome{}
}
