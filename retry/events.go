package retry

import (
	"time"

	"github.com/musepi/musepi/messages"
)

// Source is the random source a decision draws jitter from: uniform
// numbers in [0, 1). *math/rand/v2.Rand satisfies it; seed it for
// reproducible runs.
type Source interface {
	Float64() float64
}

// StartEvent is the content of auto_retry_start.
type StartEvent struct {
	Attempt      int // 1-based
	MaxAttempts  int
	Delay        time.Duration
	ErrorMessage string
	Class        Class
	BudgetDelay  time.Duration // the part of Delay the retry budget added
}

// EndEvent is the content of auto_retry_end.
type EndEvent struct {
	Success    bool   `wire:"1"`
	Attempt    int    `wire:"2"`
	FinalError string `wire:"3"` // empty on success
	Class      Class  `wire:"4"` // of the failure the chain was retrying
}

// FallbackEvent is the content of retry_fallback_applied / _succeeded.
type FallbackEvent struct {
	From string // "provider/model"
	To   string
	Role string
}

// RetryCancelled is the final error of a chain cancelled by abort_retry or
// the global abort.
const RetryCancelled = "Retry cancelled"

// FinalError is the error text a chain reports for msg: its error message,
// or its stop reason when it has none.
func FinalError(msg *messages.AssistantMessage) string {
	if e := msg.GetErrorMessage(); e != "" {
		return e
	}
	return "turn ended with stop reason " + msg.GetStopReason().String()
}
