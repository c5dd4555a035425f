package actors

import (
	"log/slog"
	"testing"
	"time"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/session"
)

// A session opened on a Log that keeps records resumes its retry chain from
// a record in backoff that is current: the history ends where the record
// was taken, or goes on only with failed attempts (made again). Any other
// record is not resumed; a stale one is cleared with the interrupted
// marker, in one commit, so that its due time wakes nobody.
func TestPrepareSessionFromRecord(t *testing.T) {
	due := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	backoff := func(seq uint64, model string) *session.Record {
		return &session.Record{State: session.Backoff, Generation: 1, Turn: 2, AutoRetry: true, Role: "default",
			Primary: "p/m", Model: model, SleepUntil: due, HistorySeq: seq,
			Chain: session.ChainRecord{Attempt: 2, Started: true, Token: 2, Generation: 1}}
	}
	tests := []struct {
		name    string
		history []*messages.Entry
		record  *session.Record // nil: none saved
		empty   bool            // a cleared (empty) record saved
		resumes bool
		// after is the history once prepared, and cleared whether the
		// record left is the empty one.
		after   string
		cleared bool
	}{
		{"no record", []*messages.Entry{user(1, "hi"), assistant(2, failed)}, nil, false, false, "user failed:", false},
		{"no record, interrupted", []*messages.Entry{user(1, "hi")}, nil, false, false, "user failed:interrupted", false},
		{"cleared record", []*messages.Entry{user(1, "hi"), assistant(2, failed)}, nil, true, false, "user failed:", true},
		{"current", []*messages.Entry{user(1, "hi"), assistant(2, failed)}, backoff(2, "p/m"), false, true, "user failed:", false},
		{"a failed attempt after it", []*messages.Entry{user(1, "hi"), assistant(2, failed), assistant(3, failed)}, backoff(2, "p/m"), false, true, "user failed: failed:", false},
		{"answered after it", []*messages.Entry{user(1, "hi"), assistant(2, failed), assistant(3, answered)}, backoff(2, "p/m"), false, false, "user failed: assistant", true},
		{"a model change after it", []*messages.Entry{user(1, "hi"), assistant(2, failed), change(3, "q/f", "fallback", false, 0)}, backoff(2, "p/m"), false, false, "user failed: change", true},
		{"from past the history's end", []*messages.Entry{user(1, "hi")}, backoff(2, "p/m"), false, false, "user failed:interrupted", true},
		{"its model's provider is gone", []*messages.Entry{user(1, "hi"), assistant(2, failed)}, backoff(2, "gone/m"), false, false, "user failed:", true},
		{"idle", []*messages.Entry{user(1, "hi"), assistant(2, answered)}, &session.Record{State: session.Idle, Primary: "p/m", Model: "p/m", HistorySeq: 2}, false, false, "user assistant", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := history.NewMemoryStore(history.WithRecords())
			defer store.Close()
			l, _, err := store.Open("s")
			if err != nil {
				t.Fatal(err)
			}
			var rec history.Record
			if tc.record != nil {
				if rec, err = encodeRecord(*tc.record); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.(history.RecordLog).CommitRecord(rec, tc.history...); err != nil {
				t.Fatal(err)
			}
			if !tc.empty && tc.record == nil { // "no record": a fresh store has none
				l.Close()
				store = history.NewMemoryStore(history.WithRecords())
				defer store.Close()
				if l, _, err = store.Open("s"); err != nil {
					t.Fatal(err)
				}
				if err := l.Append(tc.history...); err != nil {
					t.Fatal(err)
				}
			}
			l.Close()
			l, entries, err := store.Open("s")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			settings := retry.DefaultSettings()
			deps := &Deps{Clock: clock.NewVirtual(due), Log: slog.New(slog.DiscardHandler), Providers: map[string]provider.Provider{
				"p": provider.NewScripted(), "q": provider.NewScripted()}}
			p, err := PrepareSession(deps, SessionConfig{ID: "s", History: l, Restored: entries, Model: "p/m", Role: "default",
				Settings: &settings, State: &SessionState{}})
			if err != nil {
				t.Fatal(err)
			}
			if p.Resumes() != tc.resumes {
				t.Errorf("resumes = %v, want %v", p.Resumes(), tc.resumes)
			}
			if tc.resumes && (!p.cfg.State.Busy() || !p.cfg.State.IsRetrying() || !p.cfg.State.RetryAt().Equal(due)) {
				t.Errorf("state before the actor starts: busy %v, retrying %v, retry at %v; want a chain in backoff until %v",
					p.cfg.State.Busy(), p.cfg.State.IsRetrying(), p.cfg.State.RetryAt(), due)
			}
			got, err := l.Load()
			if err != nil {
				t.Fatal(err)
			}
			if describe(got) != tc.after {
				t.Errorf("history %q, want %q", describe(got), tc.after)
			}
			left, found, err := l.(history.RecordLog).LastRecord()
			if err != nil {
				t.Fatal(err)
			}
			if cleared := found && len(left.Data) == 0; cleared != tc.cleared {
				t.Errorf("record cleared = %v (found %v), want %v", cleared, found, tc.cleared)
			}
		})
	}
}
