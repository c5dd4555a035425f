package history

import (
	"time"

	"github.com/musepi/musepi/messages"
)

// Record is a session's compact durable state, kept next to its history:
// the session core's record in an encoding its owner chooses (the store
// keeps Data as opaque bytes), and when the session next needs to run
// (zero: nothing pending), which durable timers read.
type Record struct {
	Data []byte
	Due  time.Time
}

// RecordLog is a Log that also keeps its session's record: an optional
// interface of the Logs of stores that can keep one (a cluster's
// PostgreSQL store; a MemoryStore made WithRecords). A session whose Log
// is one writes its record each time its retry chain starts a backoff, and
// resumes the chain from it when the session is opened again (after a
// crash, or on another node). Writes follow the Log's rules: one writer,
// all or nothing, fenced where the store fences.
type RecordLog interface {
	Log
	// CommitRecord appends entries (none is fine) and replaces the record
	// with rec, all or nothing: after an error both are as they were.
	CommitRecord(rec Record, entries ...*messages.Entry) error
	// LastRecord returns the record last committed; found is false when the
	// session has none.
	LastRecord() (rec Record, found bool, err error)
}

// DueRecord is a passivated session's record that is due, as a store with
// durable timers returns it (cluster/pgstore's Timers).
type DueRecord struct {
	Session string
	Record
	Epoch int64 // the activation epoch that wrote the record
}
