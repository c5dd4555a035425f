package actors

import (
	"time"

	"github.com/musepi/musepi/messages"
)

// The messages below never leave their process: plain Go values, not wire
// data. Each is a track.Message, counted in flight on the runtime's clock
// until its receiver has handled it.

// turnDelta is streamed output of the running turn.
type turnDelta struct {
	turn       uint64
	kind, text string // kind: "text", "thinking" or "tool_call"
}

// turnLimits is the rate limits the running turn's response announced, as
// its headers arrived (provider.WithLimitsSeen); its final message then
// carries none.
type turnLimits struct {
	turn    uint64
	limits  *messages.RateLimits
	arrived time.Time // on the session's clock
}

// turnFinished carries the final assistant message of a turn. taken: the
// turn's guard (provider.WithGuard) found the session another
// activation's and sent no request.
type turnFinished struct {
	turn       uint64
	msg        *messages.AssistantMessage
	taken      bool
	firstToken time.Duration // from the start to the first delta (no delta: to the end)
}

// toolsFinished carries the results of a turn's tool calls. taken: the
// session's hold found it another activation's, and nothing ran.
type toolsFinished struct {
	turn    uint64
	results []*messages.ToolResult
	taken   bool
}

// compactionFinished carries the compaction hook's outcome: the compacted
// context, or the error the prompt ends with.
type compactionFinished struct {
	generation uint64
	context    []*messages.Entry
	err        string
}

// passivate is the marker a session sends itself once its root buffers
// new messages: when it comes, every message sent before is handled, and a
// session still in the backoff of ticket may leave its actors.
type passivate struct{ ticket uint64 }

// pacingTick is a credentials actor's release timer firing: the turns that
// wait for its keys' budgets may fit now.
type pacingTick struct{}

// ResumeChain tells a session resumed from its record in backoff to arm its
// backoff timer again, for what is left of it (its runtime sends it when it
// opens the session, so a virtual clock counts the work).
type ResumeChain struct{}

func (*turnDelta) Tracked()          {}
func (*turnLimits) Tracked()         {}
func (*turnFinished) Tracked()       {}
func (*toolsFinished) Tracked()      {}
func (*compactionFinished) Tracked() {}
func (*passivate) Tracked()          {}
func (*pacingTick) Tracked()         {}

// Tracked marks ResumeChain as an actor message (track.Message).
func (*ResumeChain) Tracked() {}
