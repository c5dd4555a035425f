package actors

import (
	"fmt"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/session"
)

// HandedOverError is the error text of a prompt whose session was handed
// over.
const HandedOverError = session.HandedOverError

// durable is a session actor's state for durable chains, on a Log that
// keeps records: the model changes of the step being carried out (batch),
// whether the step armed a backoff timer (armed), and whether a record in
// backoff is stored (recordKept).
type durable struct {
	records    history.RecordLog
	batch      []*messages.Entry
	armed      bool
	recordKept bool
}

// A session whose history Log is a history.RecordLog keeps its retry chain
// durable: each step that leaves the core in a backoff it armed writes the
// core's record (with the model changes of that step, in one CommitRecord),
// and the step that settles a prompt after that clears it. A session opened
// on such a Log with a record in backoff resumes its chain from it (see
// recordToResume) rather than marking its prompt interrupted.

// DecodeRecord reads a session record as the session actors write it in a
// history.Record; found is false for an empty (cleared) record.
func DecodeRecord(r history.Record) (rec session.Record, found bool, err error) {
	if len(r.Data) == 0 {
		return session.Record{}, false, nil
	}
	var w messages.SessionRecord
	if err := proto.Unmarshal(r.Data, &w); err != nil {
		return session.Record{}, false, fmt.Errorf("session record: %w", err)
	}
	rec, err = session.RecordFromWire(&w)
	return rec, err == nil, err
}

// encodeRecord is rec as a history.Record: its protobuf encoding, due when
// its backoff ends (an idle record is due never).
func encodeRecord(rec session.Record) (history.Record, error) {
	b, err := proto.Marshal(rec.Wire())
	if err != nil {
		return history.Record{}, fmt.Errorf("encode session record: %w", err)
	}
	out := history.Record{Data: b}
	if rec.State == session.Backoff {
		out.Due = rec.SleepUntil
	}
	return out, nil
}

// recordToResume returns the record in backoff that the session opened on
// log resumes its chain from (nil when there is none to resume), and
// whether a record in backoff is left that must be cleared because it is
// not resumed (so that its due time wakes nobody). A record is current
// when the history ends at the seq it was taken at, or continues after it
// only with failed assistant messages (the attempt the record armed was
// made and failed, and the process stopped before it wrote the next
// record: the resumed chain makes that attempt again, with the same
// number). Anything else after it (an answer, tool results, a model
// change, a prompt) means the chain moved on without it, and a record from
// past the history's end (a store that lost entries) cannot be trusted:
// both are stale, logged, and the history alone decides (an interrupted
// prompt is marked). A record whose models' providers are gone is not
// resumed either.
func recordToResume(deps *Deps, id string, log history.RecordLog, entries []*messages.Entry) (rec *session.Record, clear bool, err error) {
	raw, found, err := log.LastRecord()
	if err != nil || !found {
		return nil, false, err
	}
	r, found, err := DecodeRecord(raw)
	if err != nil {
		return nil, false, err
	}
	if !found || r.State != session.Backoff {
		return nil, false, nil
	}
	var last uint64
	if n := len(entries); n > 0 {
		last = entries[n-1].GetSeq()
	}
	stale := r.HistorySeq > last
	for _, e := range entries {
		if e.GetSeq() <= r.HistorySeq {
			continue
		}
		if a := e.GetAssistant(); a == nil || !isFailure(a) {
			stale = true
			break
		}
	}
	switch {
	case stale:
		deps.Log.Warn("the session's record in backoff is older than its history: resuming from the history", slog.String("session", id), slog.Uint64("record_seq", r.HistorySeq), slog.Uint64("history_seq", last))
		return nil, true, nil
	case !deps.knownModel(r.Model) || !deps.knownModel(r.Primary):
		deps.Log.Warn("the session's record in backoff names a provider this runtime lacks: resuming from the history", slog.String("session", id), slog.String("model", r.Model), slog.String("primary", r.Primary))
		return nil, true, nil
	}
	return &r, false, nil
}

// commitStep writes what the step just carried out leaves for a Log that
// keeps records: the model changes it appended (d.batch) and the core's
// record when it armed a backoff timer, or the cleared record when a
// prompt settled after a record was written, in one CommitRecord. A
// failed write ends the prompt like any history write.
func (s *SessionActor) commitStep(d *durable) {
	batch, armed := d.batch, d.armed
	d.batch, d.armed = nil, false
	rec, err := s.stepRecord(d, armed, len(batch))
	if err != nil {
		s.historyFailed(err, len(batch) > 0)
		return
	}
	if rec == nil && len(batch) == 0 {
		return
	}
	if rec != nil {
		err = d.records.CommitRecord(*rec, batch...)
	} else {
		err = s.cfg.History.Append(batch...)
	}
	if err == nil && len(batch) > 0 {
		err = s.cfg.History.Sync()
	}
	if err != nil {
		s.commitFailed(d, batch, err)
		return
	}
	s.historySeq += uint64(len(batch))
	if rec != nil {
		d.recordKept = len(rec.Data) > 0
	}
	if len(batch) > 0 {
		to := batch[len(batch)-1].GetModelChange().GetTo()
		s.cfg.State.model.Store(&to)
	}
}

// stepRecord is the record the step leaves to commit: the core's, encoded,
// when it armed a backoff timer (after the batch of batched entries); the
// cleared record when a prompt settled after one was written; else nil.
func (s *SessionActor) stepRecord(d *durable, armed bool, batched int) (*history.Record, error) {
	switch st := s.core.State(); {
	case st == session.Backoff && armed:
		r, err := s.core.Record()
		if err != nil {
			return nil, err
		}
		r.HistorySeq = s.historySeq + uint64(batched)
		enc, err := encodeRecord(r)
		if err != nil {
			return nil, err
		}
		return &enc, nil
	case st == session.Idle && d.recordKept:
		return &history.Record{}, nil
	}
	return nil, nil
}

// commitFailed takes a commit that failed: the batch's entries get no seq,
// and the prompt ends like after any failed history write, unless only
// the clearing of a settled prompt's record failed.
func (s *SessionActor) commitFailed(d *durable, batch []*messages.Entry, err error) {
	for _, e := range batch {
		e.Seq = 0
	}
	s.deps.Log.Error("commit history and session record", slog.Any("error", err), slog.String("session", s.cfg.ID))
	if s.core.State() == session.Idle && len(batch) == 0 {
		// The prompt has settled: only the clearing failed. The record
		// left is older than the history's answer, so an open takes it
		// for stale; it is not tried again.
		d.recordKept = false
		return
	}
	s.historyFailed(err, len(batch) > 0)
}

// batchModelChange queues a model change entry for commitStep.
func (s *SessionActor) batchModelChange(d *durable, entry *messages.Entry) {
	entry.Seq = s.historySeq + uint64(len(d.batch)) + 1
	d.batch = append(d.batch, entry)
}

// executeLifecycle carries out the effects of what a session does
// between and around its prompts: it answers their callers (a compaction
// asked for, an attach, a hand-over), and leaves its actors.
func (s *SessionActor) executeLifecycle(ctx actor.Context, e *session.Effect) {
	switch e.Kind {
	case session.RejectCompaction:
		ctx.Respond(&messages.CompactReply{Error: e.Error})
	case session.ReplyCompaction:
		s.publishState() // its caller reads the session no longer compacting
		tell(ctx, s.compactCaller, compactReply(s.runtime, e))
		s.compactCaller = nil
	case session.AttachCaller:
		tell(ctx, s.waiter, &messages.PromptResult{Generation: e.Generation, ErrorKind: string(session.KindBusy),
			Error: "another caller attached to the prompt"})
		s.waiter, s.attached = ctx.Sender(), true
	case session.AcceptHandOver:
		s.handOverTo = ctx.Sender()
	case session.RefuseHandOver:
		ctx.Respond(&messages.Ack{Error: e.Error})
	case session.ReplyHandOver:
		tell(ctx, s.handOverTo, &messages.Ack{Error: e.Error})
		s.handOverTo = nil
	case session.HandOver:
		s.handOver(ctx, e.Result)
	case session.Leave:
		s.leave(ctx, e.Result)
	case session.Passivate:
		s.passivate(ctx)
	case session.CancelPassivation:
		s.deps.Passivation.Unhold(s.cfg.ID)
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
func compactReply(runtime []*messages.Entry, e *session.Effect) *messages.CompactReply {
	reply := &messages.CompactReply{Error: e.Error, EntriesBefore: int32(len(runtime))}
	for i := len(runtime) - 1; i >= 0; i-- {
		if a := runtime[i].GetAssistant(); a != nil {
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

// handOver hands the session over at rest: its record is written again
// (in a backoff, with the history's current seq), the actor leaves, and
// the hand-over's caller is told. A record that cannot be written keeps
// the session here (InHandOverFailed).
func (s *SessionActor) handOver(ctx actor.Context, res *session.Result) {
	if s.core.State() == session.Backoff {
		r, err := s.core.Record()
		var enc history.Record
		if err == nil {
			r.HistorySeq = s.historySeq
			enc, err = encodeRecord(r)
		}
		if err == nil {
			err = s.dur.records.CommitRecord(enc)
		}
		if err != nil {
			s.pending = append(s.pending, session.Input{Kind: session.InHandOverFailed, Err: err.Error()})
			return
		}
	}
	s.leave(ctx, res)
	tell(ctx, s.handOverTo, &messages.Ack{})
	s.handOverTo = nil
}

// leave stops the actor without ending the session's chain, which goes on
// at its next activation: the session was handed over (its record
// written) or another activation took it (its hold found
// history.ErrTaken: this node was paused or cut off past its lease, and
// acts no more). A waiting prompt is answered with res ("handed over"),
// so that its handle attaches to the next activation.
func (s *SessionActor) leave(ctx actor.Context, res *session.Result) {
	if s.waiter != nil && res != nil {
		ctx.Send(s.waiter, promptResult(res))
		s.waiter = nil
	}
	ctx.Stop(ctx.Self())
}

// passivate gives the session's state to its root for its next actor and
// stops (see Passivation); if messages were held meanwhile the root
// delivers them instead, and the session stays (InWake).
func (s *SessionActor) passivate(ctx actor.Context) {
	kept := s.asleep // the next actor's, untouched by this one as it stops
	s.entry.passivated = &kept
	if !s.deps.Passivation.Passivated(s.cfg.ID) {
		s.entry.passivated = nil
		s.pending = append(s.pending, session.Input{Kind: session.InWake})
		return
	}
	ctx.Stop(ctx.Self())
}
