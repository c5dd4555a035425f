package actors

import (
	"fmt"
	"log/slog"

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
	r.Model, r.Primary = interned(r.Model), interned(r.Primary)
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
