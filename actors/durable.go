package actors

import (
	"errors"
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
const HandedOverError = "the session was handed over with this prompt running; it goes on where the session is opened next (attach there)"

// durable is a session actor's state for durable chains (records: its Log,
// when it keeps records; batch: the model changes of the step being
// carried out; armed: the step armed a backoff timer; recordKept: a record
// in backoff is stored), Attach (waiterAttached: the waiter came with
// AttachPrompt, and a later one replaces it; orphan: the result of the
// last prompt, when it settled with nobody waiting) and HandOver
// (handOverTo asked for one, done once the session is at rest) or a take
// over (leaving: the actor stops for either, with no InStop: the chain
// goes on at the session's next activation).
type durable struct {
	records        history.RecordLog
	batch          []*messages.Entry
	armed          bool
	recordKept     bool
	waiterAttached bool
	leaving        bool
	orphan         *messages.PromptResult
	handOverTo     *actor.PID
}

// durable returns the session's durable state, made on first use.
func (s *SessionActor) durable() *durable {
	if s.dur == nil {
		s.dur = &durable{}
	}
	return s.dur
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

// attach answers an AttachPrompt: the caller becomes the waiter of the
// running prompt of the generation asked (0: the current one), replacing
// an earlier attached caller (who is told so) but never the prompt's own
// caller, unless the attach names the own caller's address as the one it
// replaces: that is the prompt's handle, which gave its reply address up
// (its node left the cluster and came back on the same address, so the
// activation it attaches to is the one its prompt reached). A prompt that
// already settled with nobody attached is answered at once.
func (s *SessionActor) attach(ctx actor.Context, m *messages.AttachPrompt) {
	d := s.durable()
	gen := m.GetGeneration()
	if gen == 0 {
		gen = s.core.Generation()
	}
	switch {
	case s.core.Busy() && gen == s.core.Generation() && s.waiter != nil && !d.waiterAttached &&
		(s.waiter.GetAddress() != m.GetReplacesAddress() || s.waiter.GetId() != m.GetReplacesId()):
		ctx.Respond(&messages.PromptResult{Generation: gen, ErrorKind: string(session.KindBusy),
			Error: "the prompt's own caller waits for it; attach is for a prompt nobody waits for"})
	case s.core.Busy() && gen == s.core.Generation():
		if s.waiter != nil {
			ctx.Send(s.waiter, &messages.PromptResult{Generation: gen, ErrorKind: string(session.KindBusy), Error: "another caller attached to the prompt"})
		}
		s.waiter, d.waiterAttached = ctx.Sender(), true
	case d.orphan != nil && d.orphan.GetGeneration() == gen:
		ctx.Respond(d.orphan)
	default:
		ctx.Respond(&messages.PromptResult{Generation: gen, ErrorKind: string(session.KindNoPrompt),
			Error: fmt.Sprintf("no prompt of generation %d to attach to (the session is at generation %d)", gen, s.core.Generation())})
	}
}

// handOver answers a HandOver request: refused without a Log that keeps
// records, done at once when the session is at rest, else when it next is
// (handOverIfAtRest, after each step).
func (s *SessionActor) handOver(ctx actor.Context) {
	d := s.durable()
	switch {
	case d.records == nil:
		ctx.Respond(&messages.Ack{Error: "the session's history store keeps no records: its retry chain cannot be handed over"})
	case d.handOverTo != nil:
		ctx.Respond(&messages.Ack{Error: "a hand-over is in progress"})
	case errors.Is(s.hold(), history.ErrTaken):
		// Another activation has the session (this node was dropped, or
		// paused past its lease): there is nothing to hand over.
		s.leave(ctx)
		ctx.Respond(&messages.Ack{})
	default:
		d.handOverTo = ctx.Sender()
		s.handOverIfAtRest(ctx, d)
	}
}

// handOverIfAtRest hands the session over when one is asked for and the
// session is at rest (idle, or in a backoff whose record is written): its
// record is written again (with the history's current seq), the prompt's
// caller is told, and the actor stops without ending the chain (Stopping
// is no InStop); its Stopped closes the history, which frees the session
// for another runtime.
func (s *SessionActor) handOverIfAtRest(ctx actor.Context, d *durable) {
	st := s.core.State()
	if st != session.Idle && st != session.Backoff || s.compactWaiter != nil {
		return
	}
	to := d.handOverTo
	d.handOverTo = nil
	if st == session.Backoff {
		r, err := s.core.Record()
		var enc history.Record
		if err == nil {
			r.HistorySeq = s.historySeq
			enc, err = encodeRecord(r)
		}
		if err == nil {
			err = d.records.CommitRecord(enc)
		}
		if err != nil {
			ctx.Send(to, &messages.Ack{Error: fmt.Sprintf("write the session's record: %v", err)})
			return
		}
	}
	s.leave(ctx)
	ctx.Send(to, &messages.Ack{})
}

// leave stops the actor without ending the session's chain, which goes on
// at its next activation: the session was handed over (its record
// written) or another activation took it (hold found history.ErrTaken:
// this node was paused or cut off past its lease, and acts no more). A
// waiting prompt is answered "handed over", so that its handle attaches
// to the next activation.
func (s *SessionActor) leave(ctx actor.Context) {
	if s.waiter != nil {
		ctx.Send(s.waiter, &messages.PromptResult{Generation: s.core.Generation(), ErrorKind: string(session.KindHandedOver), Error: HandedOverError})
		s.waiter = nil
	}
	if s.wakeAtScheduler {
		ctx.Send(s.deps.schedulerFor(s.cfg.ID), &messages.Forget{SessionId: s.cfg.ID})
	}
	s.durable().leaving = true
	ctx.Stop(ctx.Self())
}
