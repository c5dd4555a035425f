package pgstore_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/history/historytest"
	"github.com/musepi/musepi/messages"
)

// The history.Store contract, as history's own file and memory stores pass
// it (history/history_test.go): round trip, ErrClosed, ErrLocked, bad seq,
// bad ids, invalid content, concurrent sessions.

// sample and openLog are the contract suite's.
var (
	sample  = historytest.Sample
	openLog = historytest.OpenLog
)

// The store passes the history.Store contract of the file and memory stores.
func TestContract(t *testing.T) {
	t.Parallel()
	historytest.Contract(t, func(t *testing.T) history.Store {
		s, _ := newStore(t)
		return s
	})
}

// The store's Logs pass the history.RecordLog contract of the memory
// store WithRecords.
func TestRecordContract(t *testing.T) {
	t.Parallel()
	historytest.RecordContract(t, func(t *testing.T) history.Store {
		s, _ := newStore(t)
		return s
	})
}

// Beyond the contract: Sync fails on a closed log, and a log still open
// fails once its store is closed.
func TestClosed(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	l, _ := openLog(t, s, "s")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); !errors.Is(err, history.ErrClosed) {
		t.Errorf("Sync after Close = %v, want ErrClosed", err)
	}
	open, _ := openLog(t, s, "still-open")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := open.Append(sample()[0]); !errors.Is(err, history.ErrClosed) {
		t.Errorf("Append on a log of a closed store = %v, want ErrClosed", err)
	}
}

// One writer: a second Open fails with ErrLocked, naming the holder, until
// the first Log is closed.
func TestLocked(t *testing.T) {
	t.Parallel()
	s, url := newStore(t)
	other := connect(t, url, "node-b")
	l, _ := openLog(t, s, "s")
	for name, st := range map[string]history.Store{"same node": s, "other node": other} {
		_, _, err := st.Open("s")
		var he *history.Error
		if !errors.Is(err, history.ErrLocked) || !errors.As(err, &he) || he.Op != "open" || he.Path != "s" ||
			!strings.Contains(err.Error(), s.Node()) {
			t.Errorf("%s: second Open = %v, want ErrLocked in a *history.Error naming %s", name, err, s.Node())
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	again, _ := openLog(t, other, "s")
	if err := again.Append(user(1, "after")); err != nil {
		t.Fatal(err)
	}
}

// Append is all or nothing: a batch whose seq does not continue the
// history writes nothing, and a later good Append succeeds.
func TestAppendBadSeqWritesNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		batch []uint64
	}{
		{"gap", []uint64{4}},
		{"duplicate", []uint64{2}},
		{"zero", []uint64{0}},
		{"gap inside the batch", []uint64{3, 5}},
		{"repeat inside the batch", []uint64{3, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			l, _ := openLog(t, s, "s")
			if err := l.Append(user(1, "a"), user(2, "b")); err != nil {
				t.Fatal(err)
			}
			var batch []*messages.Entry
			for _, seq := range tt.batch {
				batch = append(batch, user(seq, "bad"))
			}
			err := l.Append(batch...)
			var he *history.Error
			if !errors.Is(err, history.ErrInvalid) || !errors.As(err, &he) || he.Op != "append" {
				t.Fatalf("Append(seq %v) = %v, want ErrInvalid from append", tt.batch, err)
			}
			got, err := l.Load()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("after a failed Append the history has %d entries, want 2", len(got))
			}
			if err := l.Append(user(3, "c")); err != nil {
				t.Fatalf("a good Append after a failed one: %v", err)
			}
		})
	}
}

func TestBadSessionID(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	for _, id := range []string{"", "../x", ".hidden", "a b", "é", strings.Repeat("x", 129)} {
		if _, _, err := s.Open(id); !errors.Is(err, history.ErrBadSessionID) {
			t.Errorf("Open(%.20q) = %v, want ErrBadSessionID", id, err)
		}
	}
}

// Bytes in the table that are not an Entry of the row's seq fail Open and
// Load with ErrInvalid naming the seq as the line; the failed Open takes no
// epoch.
func TestInvalidContent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		entry []byte
	}{
		{"not protobuf", []byte{0xff, 0xff, 0xff}},
		{"another seq", func() []byte { b, _ := proto.Marshal(user(7, "x")); return b }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, url := newStore(t)
			l, _ := openLog(t, s, "s")
			epoch := l.(*pgstore.Log).Epoch()
			if err := l.Append(user(1, "ok")); err != nil {
				t.Fatal(err)
			}
			if err := sql(t, url, "INSERT INTO musepi_entries (session_id, seq, entry) VALUES ('s', 2, $1)", tt.entry); err != nil {
				t.Fatal(err)
			}
			var he *history.Error
			if _, err := l.Load(); !errors.Is(err, history.ErrInvalid) || !errors.As(err, &he) || he.Op != "load" || he.Line != 2 {
				t.Errorf("Load = %v, want ErrInvalid at line (seq) 2", err)
			}
			l.Close()
			if _, _, err := s.Open("s"); !errors.Is(err, history.ErrInvalid) || !errors.As(err, &he) || he.Op != "open" || he.Line != 2 {
				t.Errorf("Open = %v, want ErrInvalid at line (seq) 2", err)
			}
			if err := sql(t, url, "DELETE FROM musepi_entries WHERE seq = 2"); err != nil {
				t.Fatal(err)
			}
			l2, _ := openLog(t, s, "s")
			if got := l2.(*pgstore.Log).Epoch(); got != epoch+1 {
				t.Errorf("epoch after a failed Open = %d, want %d (the failed Open took none)", got, epoch+1)
			}
		})
	}
}

// The table itself refuses gaps and duplicates, whatever a writer checks.
func TestSchemaRefusesGapsAndDuplicates(t *testing.T) {
	t.Parallel()
	s, url := newStore(t)
	l, _ := openLog(t, s, "s")
	if err := l.Append(user(1, "a"), user(2, "b")); err != nil {
		t.Fatal(err)
	}
	for _, seqs := range [][]int{{2}, {4}, {0}, {3, 5}} {
		stmt := "INSERT INTO musepi_entries (session_id, seq, entry) SELECT 's', unnest($1::int[]), ''::bytea"
		if err := sql(t, url, stmt, seqs); err == nil {
			t.Errorf("inserting seq %v straight into the table succeeded", seqs)
		}
	}
	if err := sql(t, url, "INSERT INTO musepi_entries (session_id, seq, entry) SELECT 's', unnest($1::int[]), ''::bytea", []int{3, 4}); err != nil {
		t.Errorf("inserting seq 3, 4 in one statement: %v", err)
	}
}

// Sessions on two nodes append concurrently, each from its own goroutine.
func TestConcurrentSessions(t *testing.T) {
	t.Parallel()
	const sessions, perSession = 8, 20
	s, url := newStore(t)
	nodes := []*pgstore.Store{s, connect(t, url, "node-b")}
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			id := fmt.Sprint("s", i)
			l, _, err := nodes[i%2].Open(id)
			if err != nil {
				t.Error(err)
				return
			}
			defer l.Close()
			for n := range perSession {
				if err := l.Append(user(uint64(n+1), id)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i := range sessions {
		id := fmt.Sprint("s", i)
		_, got := openLog(t, s, id)
		if len(got) != perSession {
			t.Fatalf("%s: %d entries, want %d", id, len(got), perSession)
		}
		checkContiguous(t, got)
		for n, e := range got {
			if e.GetUser().GetText() != id {
				t.Errorf("%s entry %d = %v", id, n, e)
			}
		}
	}
}
