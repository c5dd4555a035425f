package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/session"
)

// callers keeps who waits for a session's answers (their reply addresses:
// the core knows none) and answers them as the core's effects say: the
// prompt's own caller or one attached to it, the caller of a compaction
// between prompts, and that of a hand-over.
type callers struct {
	prompt     *actor.PID // the Prompt call's future, or the caller attached to the prompt
	attached   bool       // prompt attached (AttachPrompt): a later one replaces it
	compaction *actor.PID // who asked for the compaction between prompts running
	handOver   *actor.PID // who asked for the hand-over the core waits to do
}

// answer carries out an effect that answers a caller: the caller of the
// message being handled (ctx's sender), or one kept; context is the
// session's before a compaction's ReplaceContext.
func (c *callers) answer(ctx actor.Context, e *session.Effect, context []*messages.Entry) {
	switch e.Kind {
	case session.RejectPrompt, session.ReplyAttach:
		ctx.Respond(promptResult(e.Result))
	case session.RejectCompaction:
		ctx.Respond(&protocol.CompactReply{Error: e.Error})
	case session.ReplyCompaction:
		tell(ctx, c.compaction, compactReply(context, e))
		c.compaction = nil
	case session.AttachCaller:
		tell(ctx, c.prompt, &protocol.PromptResult{Generation: e.Generation, ErrorKind: string(session.KindBusy),
			Error: "another caller attached to the prompt"})
		c.prompt, c.attached = ctx.Sender(), true
	case session.AcceptHandOver:
		c.handOver = ctx.Sender()
	case session.RefuseHandOver:
		ctx.Respond(&protocol.Ack{Error: e.Error})
	case session.ReplyHandOver:
		tell(ctx, c.handOver, &protocol.Ack{Error: e.Error})
		c.handOver = nil
	}
}

// settle answers the prompt's caller with its result, if one waits (he:
// the history write that failed and ended it).
func (c *callers) settle(ctx actor.Context, r *session.Result, he *history.Error) {
	if c.prompt == nil { // an attach gets it from the core
		return
	}
	res := promptResult(r)
	if he != nil && r.ErrorKind == session.KindHistory {
		res.History = &protocol.HistoryFailure{Op: he.Op, Path: he.Path, Cause: he.Err.Error()}
	}
	ctx.Send(c.prompt, res)
	c.prompt, c.attached = nil, false
}

// handedOver answers the prompt's caller with res, the prompt going on
// where the session is opened next (nil: none runs).
func (c *callers) handedOver(ctx actor.Context, res *session.Result) {
	if c.prompt != nil && res != nil {
		ctx.Send(c.prompt, promptResult(res))
		c.prompt = nil
	}
}

// tell sends msg to pid, when there is one to answer.
func tell(ctx actor.Context, pid *actor.PID, msg any) {
	if pid != nil {
		ctx.Send(pid, msg)
	}
}

// compactReply is the answer to a compaction asked for between prompts
// (ReplyCompaction e), from the context before it: its size, and
// on success the compacted context's.
func compactReply(before []*messages.Entry, e *session.Effect) *protocol.CompactReply {
	reply := &protocol.CompactReply{Error: e.Error, EntriesBefore: int32(len(before))}
	for i := len(before) - 1; i >= 0; i-- {
		if a := before[i].GetAssistant(); a != nil {
			u := a.GetUsage()
			reply.TokensBefore = u.GetInput() + u.GetCacheRead() + u.GetCacheWrite()
			break
		}
	}
	if e.Error == "" {
		reply.EntriesAfter = int32(len(e.Context))
		if len(e.Context) > 0 {
			reply.FirstKeptSeq = e.Context[0].GetSeq()
		}
	}
	return reply
}
