package musepi_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/musepi/musepi"
	hist "github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
)

// holdingStore is a store shared between nodes as a session sees it: its
// Logs are history.Holders whose Hold answers from a script (past its end:
// nil), as pgstore's does in a cluster.
type holdingStore struct {
	hist.Store
	answers []error
	log     *holdingLog // the last one opened
}

func (s *holdingStore) Open(id string) (hist.Log, []*messages.Entry, error) {
	l, entries, err := s.Store.Open(id)
	if err != nil {
		return nil, nil, err
	}
	s.log = &holdingLog{Log: l, answers: s.answers}
	return s.log, entries, nil
}

type holdingLog struct {
	hist.Log
	mu      sync.Mutex
	answers []error
	holds   int
	taken   bool
}

func (l *holdingLog) Hold(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holds++
	if len(l.answers) == 0 {
		return nil
	}
	err := l.answers[0]
	if len(l.answers) > 1 || !errors.Is(err, errCannotTell) {
		l.answers = l.answers[1:]
	}
	if errors.Is(err, hist.ErrTaken) {
		l.taken = true
	}
	return err
}

func (l *holdingLog) Taken() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.taken
}

// errCannotTell is a hold that cannot tell (the database out of reach);
// as the last answer it repeats.
var errCannotTell = &hist.Error{Op: "hold", Path: "s", Err: errors.New("renew the node's lease: context deadline exceeded")}

// TestHoldThatCannotTellWaits: a session whose hold cannot be told (its
// node cut off from the database) neither acts nor ends its prompt: the
// turn waits, asking again every second, and goes out once the hold says
// yes; a hold that says taken ends nothing and calls nothing (the prompt
// goes on at another activation); abort ends the wait.
func TestHoldThatCannotTellWaits(t *testing.T) {
	taken := &hist.Error{Op: "hold", Path: "s", Err: fmt.Errorf("another node took it (%w)", hist.ErrTaken)}
	tests := []struct {
		name    string
		answers []error
		abort   bool
		calls   int   // provider calls
		want    error // the prompt's error (nil: answered)
	}{
		{"yes at once", nil, false, 1, nil},
		{"cannot tell twice, then yes", []error{errCannotTell, errCannotTell, nil}, false, 1, nil},
		{"taken", []error{taken}, false, 0, musepi.ErrHandedOver},
		{"cannot tell, then taken", []error{errCannotTell, taken}, false, 0, musepi.ErrHandedOver},
		{"cannot tell, aborted", []error{errCannotTell}, true, 0, musepi.ErrAborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := hist.NewMemoryStore(hist.WithRecords())
			store := &holdingStore{Store: mem, answers: tt.answers}
			h := newHarness(t, musepi.WithHistoryStore(store), musepi.WithLogger(slog.New(slog.DiscardHandler)))
			h.p.SetDefault(answer("hello"))
			s, _ := h.session(musepi.WithSessionID("s"))
			ch := h.prompt(s, "hi")
			h.advance(2500 * time.Millisecond) // two more asks, a second apart
			if tt.abort {
				s.Abort()
			}
			h.run()
			r := h.settle(ch)
			if !errors.Is(r.err, tt.want) || tt.want == nil && r.err != nil {
				t.Fatalf("prompt: %v, want %v", r.err, tt.want)
			}
			if n := len(h.p.Calls()); n != tt.calls {
				t.Errorf("%d provider calls, want %d", n, tt.calls)
			}
			if tt.want == nil && store.log.holds < len(tt.answers) {
				t.Errorf("%d holds, want at least %d", store.log.holds, len(tt.answers))
			}
		})
	}
}
