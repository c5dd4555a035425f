package session

import (
	"fmt"

	"github.com/musepi/musepi/messages"
)

// What a session does between and around its prompts: a compaction a
// caller asks for, a caller attaching to a prompt, a hand-over at rest,
// and passivation (waiting out a backoff without its actors). The owner
// keeps who is answered (reply addresses); the core decides what.

// Presence says whether a session is with its actors.
type Presence uint8

// Where a session stands with its actors.
const (
	// Present: the session's actors carry it out.
	Present Presence = iota
	// Passivated: the session waits out its backoff without its actors;
	// its state is kept for its next actor, which steps it InWake.
	Passivated
	// Left: the session left its actors (handed over, or taken by
	// another activation); its chain goes on where it is opened next.
	Left
)

var presenceNames = [...]string{"present", "passivated", "left"}

func (p Presence) String() string {
	if int(p) < len(presenceNames) {
		return presenceNames[p]
	}
	return "unknown"
}

// Presence reports whether the session is with its actors.
func (c *Core) Presence() Presence { return c.presence }

// stepAway takes the inputs of a session away from its actors: its return
// (InWake), or the failed write of its hand-over (InHandOverFailed). Its
// actors stopping (InStop) ends nothing: the session lives on elsewhere.
func (c *Core) stepAway(in Input) {
	switch {
	case in.Kind == InWake && c.presence == Passivated:
		c.presence = Present
	case in.Kind == InHandOverFailed && c.presence == Left && c.handingOver:
		c.presence, c.handingOver = Present, false
		c.add(ReplyHandOver).Error = fmt.Sprintf("write the session's record: %s", in.Err)
	}
}

// compactOnRequest starts a compaction a caller asked for between
// prompts; without a hook it is refused.
func (c *Core) compactOnRequest() {
	if !c.compaction {
		c.add(RejectCompaction).Error = "no compaction hook is configured"
		return
	}
	c.become(CompactingOnRequest)
	c.add(Compact).Generation = c.r.Generation
}

// compactedOnRequest answers the caller of a compaction between prompts:
// the context becomes the compacted one, unless the hook failed.
func (c *Core) compactedOnRequest(context []*messages.Entry, err string) {
	c.become(Idle)
	reply := c.add(ReplyCompaction)
	reply.Error = err
	if err == "" {
		reply.Context = context
		c.add(ReplaceContext).Context = context
	}
}

// attach answers a caller asking for the result of the prompt of gen (0:
// the current one): it waits for a running prompt, unless ownWaits (the
// prompt's own caller waits, and the attach does not replace it); a
// settled prompt's result is given at once; any other generation has no
// prompt.
func (c *Core) attach(gen uint64, ownWaits bool) {
	if gen == 0 {
		gen = c.r.Generation
	}
	running := c.Busy() && gen == c.r.Generation
	if running && !ownWaits {
		c.add(AttachCaller).Generation = gen
		return
	}
	res := c.out.results.add()
	switch {
	case running:
		*res = Result{Generation: gen, ErrorKind: KindBusy,
			Error: "the prompt's own caller waits for it; attach is for a prompt nobody waits for"}
	case gen == c.r.Generation && gen > 0:
		c.result(res)
	default:
		*res = Result{Generation: gen, ErrorKind: KindNoPrompt,
			Error: fmt.Sprintf("no prompt of generation %d to attach to (the session is at generation %d)", gen, c.r.Generation)}
	}
	c.add(ReplyAttach).Result = res
}

// askHandOver takes a caller's hand-over: refused without a record to
// carry the chain, or while another is under way; done at once when the
// session is taken already (there is nothing to hand over) or at rest,
// else once it is (Step).
func (c *Core) askHandOver(taken bool) {
	switch {
	case !c.recorded:
		c.add(RefuseHandOver).Error = "the session's history store keeps no records: its retry chain cannot be handed over"
	case c.handingOver:
		c.add(RefuseHandOver).Error = "a hand-over is in progress"
	case taken:
		c.add(AcceptHandOver)
		c.leave()
		c.add(ReplyHandOver)
	default:
		c.add(AcceptHandOver)
		c.handingOver = true
	}
}

// handOver leaves the session's actors at rest, its record written for
// the activation that opens it next.
func (c *Core) handOver() {
	c.presence = Left
	c.add(HandOver).Result = c.handedOver()
}

// leave stops the session's actors for good: another activation has the
// session. A hand-over asked for is not done.
func (c *Core) leave() {
	if c.handingOver {
		c.handingOver = false
		c.add(ReplyHandOver).Error = "the session stopped before it could be handed over"
	}
	c.presence = Left
	c.add(Leave).Result = c.handedOver()
}

// handedOver is the result of the prompt running as the session leaves
// its actors: it goes on where the session is opened next (nil: none runs).
func (c *Core) handedOver() *Result {
	if !c.Busy() {
		return nil
	}
	res := c.out.results.add()
	*res = Result{Generation: c.r.Generation, ErrorKind: KindHandedOver, Error: HandedOverError}
	return res
}

// passivate takes the marker of the passivation the backoff timer token
// asked for: if the session still waits out that backoff it leaves its
// actors, else the passivation is cancelled.
func (c *Core) passivate(token uint64) {
	if c.r.State != Backoff || c.r.Chain.Token != token {
		c.add(CancelPassivation)
		return
	}
	c.presence = Passivated
	c.add(Passivate)
}
