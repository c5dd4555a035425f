package actors

import (
	"log/slog"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/session"
)

// historyWriter writes a session's conversation: to its history (what is
// kept), with the durable record of its retry chain on a Log that keeps
// records (dur), and to its context (what the next turn sends). A write
// that fails in a step is the step's (stepErr), and the prompt's failure
// (promptErr). It is kept while the session is passivated.
type historyWriter struct {
	cfg     *SessionConfig
	deps    *Deps
	context []*messages.Entry
	seq     uint64   // of the history's last entry
	dur     *durable // the state of durable chains (nil on a store without records)

	stepErr     *history.Error // the write that failed in the step being carried out
	revertModel bool           // ... a model change, which is undone
	promptErr   *history.Error // the write that failed and ends the prompt
}

// writeRecord writes the core's record in a backoff again, with the
// history's current seq (a hand-over).
func (w *historyWriter) writeRecord(c *session.Core) error {
	r, err := c.Record()
	var enc history.Record
	if err == nil {
		r.HistorySeq = w.seq
		enc, err = encodeRecord(r)
	}
	if err == nil {
		err = w.dur.records.CommitRecord(enc)
	}
	return err
}

// write appends entries (to the context too when toContext) and
// syncs the history, as at the end of a turn; it returns the error text
// of a write that failed ("" when written), keeping the error for the
// prompt's result.
func (w *historyWriter) write(toContext bool, entries ...*messages.Entry) string {
	if len(entries) == 0 {
		return ""
	}
	if err := w.appendSynced(toContext, entries...); err != nil {
		if w.promptErr == nil {
			w.promptErr = w.asError(err)
		}
		return err.Error()
	}
	return ""
}

// stepFailure takes the history write that failed in the step, if any:
// it is the prompt's failure, and the input returned ends the prompt with
// it (the core decides how).
func (w *historyWriter) stepFailure() (session.Input, error) {
	err := w.stepErr
	if err == nil {
		return session.Input{}, nil
	}
	if w.promptErr == nil {
		w.promptErr = err
	}
	failed := session.Input{Kind: session.InHistoryFailed, Err: err.Error(), RevertModel: w.revertModel}
	w.stepErr, w.revertModel = nil, false
	return failed, err
}

// append adds entries to the history, and to the context when
// toContext, all or nothing: after a failed write both are as they were
// (no seq is spent) and the error is returned.
func (w *historyWriter) append(toContext bool, entries ...*messages.Entry) error {
	for i, e := range entries {
		e.Seq = w.seq + uint64(i) + 1
	}
	if err := w.cfg.History.Append(entries...); err != nil {
		for _, e := range entries {
			e.Seq = 0
		}
		w.deps.Log.Error("append history", slog.Any("error", err), slog.String("session", w.cfg.ID))
		return err
	}
	w.seq += uint64(len(entries))
	if toContext {
		w.context = append(w.context, entries...)
	}
	return nil
}

// appendSynced is append, then the store's sync (the end of a turn).
func (w *historyWriter) appendSynced(toContext bool, entries ...*messages.Entry) error {
	if err := w.append(toContext, entries...); err != nil {
		return err
	}
	err := w.cfg.History.Sync()
	if err != nil {
		w.deps.Log.Error("sync history", slog.Any("error", err), slog.String("session", w.cfg.ID))
	}
	return err
}

// stepFailed records a history write of this step that failed; once
// the step's effects are carried out the core learns of it.
func (w *historyWriter) stepFailed(err error, revertModel bool) {
	if w.stepErr == nil {
		w.stepErr, w.revertModel = w.asError(err), revertModel
	}
}

// asError is err, a failed write of the session's Log, as the
// *history.Error the Log's contract promises (another error is wrapped in
// one).
func (w *historyWriter) asError(err error) *history.Error {
	if he, ok := err.(*history.Error); ok {
		return he
	}
	return &history.Error{Op: "append", Path: w.cfg.ID, Err: err}
}

// appendModelChange writes a change of model to the history (with the
// step's record on a durable chain) and publishes the new model; a write
// that fails keeps the model as it was.
func (w *historyWriter) appendModelChange(change *session.ModelChange) {
	entry := &messages.Entry{Entry: &messages.Entry_ModelChange{ModelChange: modelChange(change)}}
	if d := w.dur; d != nil && d.records != nil { // written with the step's record (commitStep)
		w.batchModelChange(d, entry)
		return
	}
	write := w.append
	if change.Reason == "user" {
		write = w.appendSynced
	}
	if err := write(false, entry); err != nil {
		w.stepFailed(err, true) // the model stays as it was
		return
	}
	to := change.To
	w.cfg.State.model.Store(&to)
}

// stripTrailingError removes the failed assistant message at the end of
// the context (it stays in the history).
func (w *historyWriter) stripTrailingError() {
	if n := len(w.context); n > 0 {
		if m := w.context[n-1].GetAssistant(); m != nil && isFailure(m) {
			w.context[n-1] = nil
			w.context = w.context[:n-1]
		}
	}
}

// messages answers a MessagesRequest: a copy of the context, or the
// history as stored.
func (w *historyWriter) messages(history bool) *protocol.MessagesReply {
	if !history {
		out := make([]*messages.Entry, len(w.context))
		for i, e := range w.context {
			out[i] = proto.Clone(e).(*messages.Entry)
		}
		return &protocol.MessagesReply{Entries: out}
	}
	entries, err := w.cfg.History.Load()
	if err != nil {
		return &protocol.MessagesReply{Error: err.Error()}
	}
	return &protocol.MessagesReply{Entries: entries}
}

// commitStep writes what the step just carried out leaves for a Log that
// keeps records: the model changes it appended (d.batch) and the core's
// record when it armed a backoff timer, or the cleared record when a
// prompt settled after a record was written, in one CommitRecord. A
// failed write ends the prompt like any history write.
func (w *historyWriter) commitStep(c *session.Core) {
	d := w.dur
	if d == nil || d.records == nil {
		return
	}
	batch, armed := d.batch, d.armed
	d.batch, d.armed = nil, false
	rec, err := w.stepRecord(c, d, armed, len(batch))
	if err != nil {
		w.stepFailed(err, len(batch) > 0)
		return
	}
	if rec == nil && len(batch) == 0 {
		return
	}
	if rec != nil {
		err = d.records.CommitRecord(*rec, batch...)
	} else {
		err = w.cfg.History.Append(batch...)
	}
	if err == nil && len(batch) > 0 {
		err = w.cfg.History.Sync()
	}
	if err != nil {
		w.commitFailed(c, d, batch, err)
		return
	}
	w.seq += uint64(len(batch))
	if rec != nil {
		d.recordKept = len(rec.Data) > 0
	}
	if len(batch) > 0 {
		to := batch[len(batch)-1].GetModelChange().GetTo()
		w.cfg.State.model.Store(&to)
	}
}

// stepRecord is the record the step leaves to commit: the core's, encoded,
// when it armed a backoff timer (after the batch of batched entries); the
// cleared record when a prompt settled after one was written; else nil.
func (w *historyWriter) stepRecord(c *session.Core, d *durable, armed bool, batched int) (*history.Record, error) {
	switch st := c.State(); {
	case st == session.Backoff && armed:
		r, err := c.Record()
		if err != nil {
			return nil, err
		}
		r.HistorySeq = w.seq + uint64(batched)
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
func (w *historyWriter) commitFailed(c *session.Core, d *durable, batch []*messages.Entry, err error) {
	for _, e := range batch {
		e.Seq = 0
	}
	w.deps.Log.Error("commit history and session record", slog.Any("error", err), slog.String("session", w.cfg.ID))
	if c.State() == session.Idle && len(batch) == 0 {
		// The prompt has settled: only the clearing failed. The record
		// left is older than the history's answer, so an open takes it
		// for stale; it is not tried again.
		d.recordKept = false
		return
	}
	w.stepFailed(err, len(batch) > 0)
}

// batchModelChange queues a model change entry for commitStep.
func (w *historyWriter) batchModelChange(d *durable, entry *messages.Entry) {
	entry.Seq = w.seq + uint64(len(d.batch)) + 1
	d.batch = append(d.batch, entry)
}

// deliverSteering adds the waiting steering messages to the conversation,
// between a turn's tool results and the next turn, and tells the
// subscribers (events).
func (w *historyWriter) deliverSteering(events *eventPublisher) {
	if w.cfg.Steering == nil {
		return
	}
	for _, text := range w.cfg.Steering() {
		user := &messages.UserMessage{Text: text, TimestampMs: w.deps.Clock.Now().UnixMilli()}
		if err := w.write(true, &messages.Entry{Entry: &messages.Entry_User{User: user}}); err != "" {
			w.deps.Log.Error("steering message not written to the history", slog.String("session", w.cfg.ID), slog.String("error", err))
			continue
		}
		events.emitWire(func(ev *messages.SessionEvent) {
			ev.Event = &messages.SessionEvent_SteeringDelivered{SteeringDelivered: &messages.SteeringDelivered{User: user}}
		})
	}
}
