// Package rpc serves a MusePi session as JSON lines on a reader and a
// writer (stdin/stdout in `musepi rpc`), in the shape pi-style coding-agent
// clients speak: one command object per input line, one response per
// command, and the session's events as further lines.
package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/internal/retrytally"
)

// DefaultMaxLine bounds one input line (1 MiB).
const DefaultMaxLine = 1 << 20

// Server runs one session at a time on a runtime.
type Server struct {
	Runtime *musepi.Runtime
	// SessionOptions start each session (WithModel is required).
	SessionOptions []musepi.SessionOption
	Out            io.Writer
	Log            *slog.Logger
	// MaxLine bounds an input line; longer lines get an error response
	// (default DefaultMaxLine).
	MaxLine int
	// Models are the models get_available_models lists and cycle_model
	// cycles through, in order.
	Models []Model
	// HistoryDir, when the runtime keeps history in files there, names the
	// session file get_state reports and switch_session opens.
	HistoryDir string

	writeMu  sync.Mutex
	writeErr error                   // the first failed write of Out; serving stops
	stop     context.CancelCauseFunc // ends Serve

	mu          sync.Mutex
	session     *musepi.Session
	unsubscribe func()
	prompting   bool
	// lastRunOut: the running prompt's agent_end with willRetry false is
	// out; its prompt has settled in the session and is ending here.
	lastRunOut bool
	prompts    sync.WaitGroup
	// started and settled count prompts and the agent_settled lines
	// written, so that Serve ends only once every prompt's last event is out.
	started, settled int
	// settledCond is signalled on each agent_settled written and each
	// prompt ended.
	settledCond *sync.Cond
	// prefs are the settings the client chose (thinking level, queue
	// modes, session name); new sessions keep them but the name.
	prefs prefs
	// queue holds the messages sent while a prompt runs.
	queue queue
	// retry is the retry backoff being waited out, if any.
	retry retryWait
	// tally counts the session's retries made (docs/retry-policy.md,
	// "Terms"), for get_session_stats.
	tally retrytally.Tally
}

// command is one input line. Fields are decoded per command type.
type command struct {
	ID   json.RawMessage `json:"id,omitempty"`
	Type string          `json:"type"`
}

// Serve reads commands from in until it ends or ctx is done, then waits for
// a running prompt to settle (aborting it when ctx is done) and closes the
// session. A write to Out that fails (the client closed the pipe: EPIPE)
// is logged once and ends serving the same way, and Serve returns it.
func (s *Server) Serve(ctx context.Context, in io.Reader) error {
	s.settledCond = sync.NewCond(&s.mu)
	ctx, s.stop = context.WithCancelCause(ctx)
	defer s.stop(nil)
	if err := s.startSession(ctx, s.SessionOptions...); err != nil {
		return err
	}
	lines := make(chan inputLine)
	readErr := make(chan error, 1)
	go func() { readErr <- s.readLines(ctx, in, lines) }()
	var err error
loop:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				err = <-readErr
				break loop
			}
			if line.tooLong > 0 {
				id, typ := exactFields(line.data)
				if typ == "" {
					typ = "parse"
				}
				s.respondError(id, typ, fmt.Sprintf("line longer than %d bytes (the --max-line limit)", line.tooLong))
				continue
			}
			s.handle(ctx, line.data)
		case <-ctx.Done():
			break loop
		}
	}
	if ctx.Err() != nil {
		s.current().Abort()
	}
	s.prompts.Wait()
	s.waitSettledWritten(5 * time.Second)
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CloseTimeout)
	defer cancel()
	closeErr := s.closeSession(closeCtx)
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.writeErr != nil {
		return s.writeErr
	}
	return errors.Join(err, closeErr)
}

// CloseTimeout bounds closing the session when serving ends: a session
// whose host does not answer (its node is frozen) fails Serve after it.
const CloseTimeout = 5 * time.Second

// waitSettledWritten waits, at most limit, until an agent_settled line has
// been written for every prompt started.
func (s *Server) waitSettledWritten(limit time.Duration) {
	timer := time.AfterFunc(limit, func() {
		s.mu.Lock()
		s.settled = s.started // give up waiting
		s.settledCond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.settled < s.started {
		s.settledCond.Wait()
	}
}

// inputLine is one input line (without its newline), or the prefix of one
// longer than tooLong bytes, answered in its turn with an error carrying
// the id and command the prefix holds.
type inputLine struct {
	data    []byte
	tooLong int
}

// readLines sends each input line, in order.
func (s *Server) readLines(ctx context.Context, in io.Reader, out chan<- inputLine) error {
	defer close(out)
	max := s.MaxLine
	if max <= 0 {
		max = DefaultMaxLine
	}
	r := bufio.NewReaderSize(in, 64*1024)
	for {
		line, tooLong, err := readLine(r, max)
		item := inputLine{data: line}
		if tooLong {
			item.tooLong = max
		}
		if tooLong || len(bytes.TrimSpace(line)) > 0 {
			select {
			case out <- item:
			case <-ctx.Done():
				return nil
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("rpc: read: %w", err)
		}
	}
}

// longLinePrefix is how much of an over-long line is kept to find its id.
const longLinePrefix = 4096

// readLine reads one line of at most max bytes; a longer line is consumed
// to its end and reported as too long, with its first bytes (at most
// longLinePrefix) as line.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, isPrefix, err := r.ReadLine()
		switch {
		case !tooLong && len(line)+len(chunk) <= max:
			line = append(line, chunk...)
		case !tooLong:
			tooLong = true
			line = appendUpTo(line[:min(len(line), longLinePrefix)], chunk, longLinePrefix)
		default:
			line = appendUpTo(line, chunk, longLinePrefix)
		}
		if err != nil || !isPrefix {
			return line, tooLong, err
		}
	}
}

// appendUpTo appends to b as much of more as keeps it within n bytes.
func appendUpTo(b, more []byte, n int) []byte {
	return append(b, more[:min(len(more), max(0, n-len(b)))]...)
}

func (s *Server) current() *musepi.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session
}

// startSession starts a session with opts and subscribes to its events;
// the session takes its steering messages from the server's queue. On a
// cluster's runtime (musepi rpc --cluster) the session is hosted by
// another node, which a Go function cannot reach: steering messages then
// wait in the queue and go as the next prompt once the running one has
// settled, before the follow-ups.
func (s *Server) startSession(ctx context.Context, opts ...musepi.SessionOption) error {
	opts = append([]musepi.SessionOption(nil), opts...)
	if s.Runtime.ClusterAddress() == "" {
		opts = append(opts, musepi.WithSteering(s.takeSteering))
	}
	sess, err := s.Runtime.NewSession(ctx, opts...)
	if err != nil {
		return fmt.Errorf("rpc: start session: %w", err)
	}
	t := &translator{s: s}
	s.mu.Lock()
	s.session = sess
	s.prefs.name = ""
	s.tally = retrytally.Tally{}
	s.retry = retryWait{}
	s.mu.Unlock()
	unsub := sess.Subscribe(func(ev musepi.Event) {
		s.mu.Lock()
		s.tally.Add(ev) // before its line: a client that read it asks after
		s.mu.Unlock()
		s.writeEvent(t, wireEvent(ev.Header().Wire()))
	})
	s.mu.Lock()
	s.unsubscribe = unsub
	s.mu.Unlock()
	return nil
}

func (s *Server) closeSession(ctx context.Context) error {
	s.mu.Lock()
	sess, unsub := s.session, s.unsubscribe
	s.mu.Unlock()
	if sess == nil {
		return nil
	}
	defer unsub()
	if err := sess.Close(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("close session %s: not done within %s (does the node that hosts it answer?)", sess.ID(), CloseTimeout)
		}
		return fmt.Errorf("close session %s: %w", sess.ID(), err)
	}
	return nil
}

// writeEvent writes one session event as pi's lines (see translator).
func (s *Server) writeEvent(t *translator, ev event) {
	t.event(ev)
	if ev.Type == "agent_settled" {
		s.mu.Lock()
		s.settled++
		if s.settledCond != nil {
			s.settledCond.Broadcast()
		}
		s.mu.Unlock()
	}
}

func (s *Server) writeLine(obj any) {
	b, err := json.Marshal(obj)
	if err != nil {
		s.Log.Error("encode rpc line", slog.Any("error", err))
		return
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.writeErr != nil {
		return
	}
	b = append(b, '\n')
	if _, err := s.Out.Write(b); err != nil {
		s.writeErr = fmt.Errorf("rpc: write: %w", err)
		s.Log.Error("cannot write to the client (it closed its end?): stopping; the running prompt is aborted and the history kept", slog.Any("error", err))
		if s.stop != nil {
			s.stop(s.writeErr)
		}
	}
}

func response(id json.RawMessage, cmd string) map[string]any {
	r := map[string]any{"type": "response", "command": cmd}
	if id != nil {
		r["id"] = id
	}
	return r
}

func (s *Server) respond(id json.RawMessage, cmd string, data any) {
	r := response(id, cmd)
	r["success"] = true
	if data != nil {
		r["data"] = data
	}
	s.writeLine(r)
}

func (s *Server) respondError(id json.RawMessage, cmd, msg string) {
	r := response(id, cmd)
	r["success"] = false
	r["error"] = msg
	s.writeLine(r)
}

// handle answers one command line.
func (s *Server) handle(ctx context.Context, line []byte) {
	c, err := parseCommand(line)
	if err != nil {
		if c.ID == nil {
			c.ID, _ = exactFields(line)
		}
		s.respondError(c.ID, "parse", err.Error())
		return
	}
	if err := checkKeys(line); err != nil {
		id, typ := exactFields(line)
		s.respondError(id, typ, err.Error())
		return
	}
	if err := checkID(c.ID); err != nil {
		s.respondError(c.ID, c.Type, err.Error())
		return
	}
	h, ok := handlers[c.Type]
	if !ok {
		if c.Type == "" {
			s.respondError(c.ID, "parse", `missing "type"`)
			return
		}
		if _, known := unsupported[c.Type]; known {
			s.respondError(c.ID, c.Type, fmt.Sprintf("%s is not supported by MusePi", c.Type))
			return
		}
		s.respondError(c.ID, c.Type, fmt.Sprintf("unknown command %q", c.Type))
		return
	}
	data, err := h(s, ctx, line)
	if err != nil {
		s.respondError(c.ID, c.Type, err.Error())
		return
	}
	s.respond(c.ID, c.Type, data)
}

// handler runs one command type and returns the response data.
type handler func(s *Server, ctx context.Context, line []byte) (any, error)

// decode reads the command's own fields strictly: each named field must be
// present (required) and of the right type.
func decode(line []byte, v any, required ...string) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return fmt.Errorf("malformed command: %w", err)
	}
	for _, f := range required {
		if v, ok := raw[f]; !ok || string(v) == "null" {
			return fmt.Errorf("missing field %q", f)
		}
	}
	if err := json.Unmarshal(line, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("field %q: want %s, got %s", te.Field, te.Type, te.Value)
		}
		return fmt.Errorf("malformed command: %w", err)
	}
	return nil
}
