package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/retry"
)

// logLines collects a Store's log lines (zerolog writes one per Write).
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(bytes.TrimSpace(p)))
	return len(p), nil
}

// String is every line so far.
func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// count is how many lines contain s.
func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// logged is a Store option logging to a new logLines, at Info.
func logged() (*logLines, pgstore.Option) {
	l := &logLines{}
	return l, pgstore.WithLogger(slog.New(zerolog.NewSlogHandler(zerolog.New(l).Level(zerolog.InfoLevel))))
}

const (
	outageBegins = "database writes meet a transient error"
	outageEnds   = "database writes get through again"
)

// fixed is a jitter source that always draws r.
type fixed float64

func (f fixed) Float64() float64 { return float64(f) }

// TestRetryDelay: 100 ms doubling to 2 s, jittered to 75-100 %.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	for _, tc := range []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{1, 1, ms(100)}, {2, 1, ms(200)}, {3, 1, ms(400)}, {4, 1, ms(800)}, {5, 1, ms(1600)},
		{6, 1, ms(2000)}, {100, 1, ms(2000)},
		{1, 0, ms(75)}, {3, 0.5, ms(350)}, {6, 0, ms(1500)},
	} {
		if got := pgstore.RetryDelay(fixed(tc.r), tc.attempt); got != tc.want {
			t.Errorf("attempt %d, jitter draw %v: delay %s, want %s", tc.attempt, tc.r, got, tc.want)
		}
	}
}

// TestWritesRetryThroughARestart: 20 sessions append one entry after the
// other while PostgreSQL restarts (pg_ctl restart -m fast): every append
// gets through, each history holds exactly what was appended, in order,
// and the outage is logged once.
func TestWritesRetryThroughARestart(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	log, logOpt := logged()
	s := connect(t, url, "node-a", logOpt, pgstore.WithJitter(retry.NewPCGSource(1, 2)))
	const sessions = 20
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		appended [sessions]int
		logs     [sessions]*pgstore.Log
		errs     = make(chan error, sessions)
	)
	for i := range sessions {
		l, _, err := s.OpenContext(context.Background(), fmt.Sprintf("s%d", i))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		logs[i] = l
		wg.Go(func() {
			for seq := uint64(1); !stop.Load(); seq++ {
				if err := l.Append(user(seq, "entry")); err != nil {
					errs <- fmt.Errorf("session %d, seq %d: %w", i, seq, err)
					return
				}
				appended[i]++
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := srv.Restart(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	restart := time.Since(start)
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := 0
	for i := range sessions {
		entries, err := logs[i].Load()
		if err != nil {
			t.Fatal(err)
		}
		checkContiguous(t, entries)
		if len(entries) != appended[i] {
			t.Errorf("session %d: %d entries in the database, %d appended", i, len(entries), appended[i])
		}
		total += appended[i]
	}
	if b, e := log.count(outageBegins), log.count(outageEnds); b != 1 || e != 1 {
		t.Errorf("logged %d outage beginnings and %d ends; want one of each:\n%s", b, e, log)
	}
	t.Logf("restart took %s; %d appends by %d sessions, none failed; log:\n%s", restart.Round(time.Millisecond), total, sessions, log)
}

// TestWriteRetryEnds: while PostgreSQL is down, an append is retried for
// the Store's write retry and then fails with the last transient error,
// saying so; one whose Store closes fails at once with history.ErrClosed.
// The Log stays usable: once the server is back, the same append gets
// through. It runs alone, before the package's parallel tests: it bounds
// how soon after the Close the append ends (300 ms).
func TestWriteRetryEnds(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	for _, tc := range []struct {
		name  string
		close bool // close the Store 300 ms into the append
		want  string
	}{
		{"after the write retry", false, "the database failed for"},
		{"when the Store closes", true, "closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := pgstore.Connect(context.Background(), url, pgstore.WithNode("n"), pgstore.WithWriteRetry(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			l, _, err := s.OpenContext(context.Background(), "s-"+strings.ReplaceAll(tc.name, " ", "-"))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			restarted := make(chan error, 1)
			go func() { restarted <- srv.Restart(context.Background(), 3*time.Second) }()
			time.Sleep(500 * time.Millisecond) // down
			if tc.close {
				time.AfterFunc(300*time.Millisecond, func() { _ = s.Close() })
			}
			start := time.Now()
			err = l.Append(user(1, "while down"))
			took := time.Since(start)
			if err := <-restarted; err != nil {
				t.Fatal(err)
			}
			switch {
			case err == nil:
				t.Fatalf("Append succeeded after %s with the server down", took)
			case !strings.Contains(err.Error(), tc.want):
				t.Errorf("Append = %v; want %q", err, tc.want)
			case tc.close && (!errors.Is(err, history.ErrClosed) || took > 600*time.Millisecond):
				t.Errorf("Append = %v after %s; want history.ErrClosed soon after the Close at 300 ms", err, took)
			case !tc.close && (!pgstore.Transient(err) || took < time.Second || took > 3*time.Second):
				t.Errorf("Append = %v after %s; want the transient error after the 1 s retry", err, took)
			}
			t.Logf("after %s: %v", took.Round(time.Millisecond), err)
			if tc.close {
				return
			}
			if err := l.Append(user(1, "back")); err != nil {
				t.Fatalf("Append once the server is back: %v", err)
			}
			if entries, err := l.Load(); err != nil || len(entries) != 1 || entries[0].GetUser().GetText() != "back" {
				t.Errorf("Load = %v, %v; want the one entry appended once the server was back", entries, err)
			}
		})
	}
}

// TestRetryAfterALostReply: a write whose connection breaks after the
// server committed it (the reply lost on the way) is retried, and the
// retry neither fails on the entries already there nor writes them twice.
func TestRetryAfterALostReply(t *testing.T) {
	t.Parallel()
	url := server.NewDatabase(t)
	p := startCutProxy(t, url)
	// One connection, kept: the second append's batch is one round trip
	// over it, its statements prepared by the first.
	s := connect(t, p.url+"&pool_max_conns=1", "node-a", pgstore.WithLease(time.Hour))
	l, _, err := s.OpenContext(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append(user(1, "first")); err != nil {
		t.Fatal(err)
	}
	p.armed.Store(true)
	if err := l.Append(user(2, "second"), user(3, "third")); err != nil {
		t.Fatalf("Append whose reply was lost: %v", err)
	}
	if p.cut.Load() != 1 {
		t.Fatalf("the proxy cut %d replies, want 1", p.cut.Load())
	}
	entries, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	checkContiguous(t, entries)
	if len(entries) != 3 {
		t.Errorf("%d entries, want 3", len(entries))
	}
}

// cutProxy forwards TCP connections to a database. Once armed, it drops
// the next bytes the server sends and closes that connection: PostgreSQL
// answers a batch once it has run and committed it, so the client never
// learns that its write was done.
type cutProxy struct {
	url   string // the database's URL through the proxy
	armed atomic.Bool
	cut   atomic.Int32 // replies cut
}

func startCutProxy(t *testing.T, dbURL string) *cutProxy {
	t.Helper()
	target := strings.SplitN(strings.SplitN(dbURL, "@", 2)[1], "/", 2)[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{url: strings.Replace(dbURL, target, ln.Addr().String(), 1)}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	keep := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	}
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return // closed at cleanup
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			keep(client)
			keep(server)
			wg.Go(func() { _, _ = io.Copy(server, client) })
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if n > 0 && p.armed.CompareAndSwap(true, false) {
						p.cut.Add(1)
						client.Close()
						server.Close()
						return
					}
					if n > 0 {
						if _, err := client.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						client.Close()
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p
}
