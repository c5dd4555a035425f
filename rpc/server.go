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
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/internal/plaintext"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// DefaultMaxLine bounds one input line (1 MiB).
const DefaultMaxLine = 1 << 20

// Server runs one session at a time on a runtime.
type Server struct {
	Runtime *musepi.Runtime
	// SessionOptions start each session (WithModel is required).
	SessionOptions []musepi.SessionOption
	Out            io.Writer
	Log            zerolog.Logger
	// MaxLine bounds an input line; longer lines get an error response
	// (default DefaultMaxLine).
	MaxLine int

	writeMu  sync.Mutex
	writeErr error                   // the first failed write of Out; serving stops
	stop     context.CancelCauseFunc // ends Serve

	mu          sync.Mutex
	session     *musepi.Session
	unsubscribe func()
	prompting   bool
	prompts     sync.WaitGroup
	// started and settled count prompts and the agent_settled lines
	// written, so that Serve ends only once every prompt's last event is out.
	started, settled int
	settledCond      *sync.Cond
}

// command is one input line. Fields are decoded per command type.
type command struct {
	ID   *string `json:"id,omitempty"`
	Type string  `json:"type"`
}

// Serve reads commands from in until it ends or ctx is done, then waits for
// a running prompt to settle (aborting it when ctx is done) and closes the
// session. A write to Out that fails (the client closed the pipe: EPIPE)
// is logged once and ends serving the same way, and Serve returns it.
func (s *Server) Serve(ctx context.Context, in io.Reader) error {
	s.settledCond = sync.NewCond(&s.mu)
	ctx, s.stop = context.WithCancelCause(ctx)
	defer s.stop(nil)
	if err := s.startSession(ctx); err != nil {
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
	s.closeSession(context.WithoutCancel(ctx))
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.writeErr != nil {
		return s.writeErr
	}
	return err
}

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

func (s *Server) startSession(ctx context.Context) error {
	sess, err := s.Runtime.NewSession(ctx, s.SessionOptions...)
	if err != nil {
		return fmt.Errorf("rpc: start session: %w", err)
	}
	unsub := sess.Subscribe(s.writeEvent)
	s.mu.Lock()
	s.session, s.unsubscribe = sess, unsub
	s.mu.Unlock()
	return nil
}

func (s *Server) closeSession(ctx context.Context) {
	s.mu.Lock()
	sess, unsub := s.session, s.unsubscribe
	s.mu.Unlock()
	if sess == nil {
		return
	}
	if err := sess.Close(ctx); err != nil {
		s.Log.Warn().Err(err).Str("session", sess.ID()).Msg("close session")
	}
	unsub()
}

// writeEvent writes one session event as a line: its payload's fields plus
// "type" (and "sessionId").
func (s *Server) writeEvent(ev musepi.Event) {
	obj := toJSON(ev.Payload)
	if obj == nil {
		obj = map[string]any{}
	}
	obj["type"] = ev.Type
	obj["sessionId"] = ev.SessionID
	s.writeLine(obj)
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
		s.Log.Error().Err(err).Msg("encode rpc line")
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
		s.Log.Error().Err(err).Msg("cannot write to the client (it closed its end?): stopping; the running prompt is aborted and the history kept")
		if s.stop != nil {
			s.stop(s.writeErr)
		}
	}
}

func response(id *string, cmd string) map[string]any {
	r := map[string]any{"type": "response", "command": cmd}
	if id != nil {
		r["id"] = *id
	}
	return r
}

func (s *Server) respond(id *string, cmd string, data any) {
	r := response(id, cmd)
	r["success"] = true
	if data != nil {
		r["data"] = data
	}
	s.writeLine(r)
}

func (s *Server) respondError(id *string, cmd, msg string) {
	r := response(id, cmd)
	r["success"] = false
	r["error"] = msg
	s.writeLine(r)
}

// handle answers one command line.
func (s *Server) handle(ctx context.Context, line []byte) {
	var c command
	if err := json.Unmarshal(line, &c); err != nil {
		id, _ := exactFields(line)
		s.respondError(id, "", "malformed command: "+err.Error())
		return
	}
	if err := checkKeys(line); err != nil {
		id, typ := exactFields(line)
		s.respondError(id, typ, err.Error())
		return
	}
	if c.ID != nil {
		if err := plaintext.Check("id", *c.ID); err != nil {
			s.respondError(c.ID, c.Type, err.Error())
			return
		}
	}
	h, ok := handlers[c.Type]
	if !ok {
		if c.Type == "" {
			s.respondError(c.ID, "", `missing "type"`)
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

var handlers = map[string]handler{
	"prompt":         (*Server).prompt,
	"abort":          (*Server).abort,
	"abort_retry":    (*Server).abortRetry,
	"set_auto_retry": (*Server).setAutoRetry,
	"get_state":      (*Server).getState,
	"get_messages":   (*Server).getMessages,
	"set_model":      (*Server).setModel,
	"new_session":    (*Server).newSession,
}

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

func (s *Server) prompt(ctx context.Context, line []byte) (any, error) {
	var c struct {
		Message string `json:"message"`
	}
	if err := decode(line, &c, "message"); err != nil {
		return nil, err
	}
	// Checked after decoding: invalid UTF-8 replaced by U+FFFD can make the
	// text longer than the line.
	if err := s.Runtime.CheckPrompt(c.Message); err != nil {
		return nil, fmt.Errorf("prompt of %d bytes rejected: %w", len(c.Message), err)
	}
	s.mu.Lock()
	if s.prompting {
		s.mu.Unlock()
		return nil, errors.New("a prompt is already running; send abort or wait for agent_settled")
	}
	s.prompting = true
	s.started++
	s.prompts.Add(1)
	sess := s.session
	s.mu.Unlock()
	// The response waits until the session has recorded the prompt in its
	// history, so that a success means it is kept; a prompt that could not
	// be recorded gets an error response naming the file.
	accepted := make(chan error, 1)
	sess.Submit(context.WithoutCancel(ctx), c.Message, func(err error) { accepted <- err },
		func(_ *messages.AssistantMessage, err error) {
			var settledBySession *musepi.PromptError
			switch {
			case err == nil:
			case errors.As(err, &settledBySession):
				s.Log.Debug().Err(err).Str("session", sess.ID()).Msg("prompt ended")
			default:
				// The session never took the prompt (a runtime limit, a closed
				// session), so no agent_settled will come from it: the client
				// still gets one.
				s.Log.Warn().Err(err).Str("session", sess.ID()).Msg("prompt not started")
				s.writeEvent(musepi.Event{SessionID: sess.ID(), Type: "agent_settled",
					Payload: &messages.AgentSettled{Success: false, Error: err.Error()}})
			}
			s.mu.Lock()
			s.prompting = false
			s.mu.Unlock()
			s.prompts.Done()
		})
	return nil, <-accepted
}

func (s *Server) abort(context.Context, []byte) (any, error) {
	s.current().Abort()
	return nil, nil
}

func (s *Server) abortRetry(context.Context, []byte) (any, error) {
	s.current().AbortRetry()
	return nil, nil
}

func (s *Server) setAutoRetry(_ context.Context, line []byte) (any, error) {
	var c struct {
		Enabled bool `json:"enabled"`
	}
	if err := decode(line, &c, "enabled"); err != nil {
		return nil, err
	}
	s.current().SetAutoRetryEnabled(c.Enabled)
	return nil, nil
}

func (s *Server) getState(ctx context.Context, _ []byte) (any, error) {
	sess := s.current()
	entries, err := sess.Messages(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	prompting := s.prompting
	s.mu.Unlock()
	prov, model, _ := retry.SplitModel(sess.Model())
	return map[string]any{
		"sessionId":        sess.ID(),
		"model":            map[string]any{"provider": prov, "id": model},
		"isStreaming":      prompting,
		"autoRetryEnabled": sess.AutoRetryEnabled(),
		"isRetrying":       sess.IsRetrying(),
		"messageCount":     len(entries),
	}, nil
}

func (s *Server) getMessages(ctx context.Context, _ []byte) (any, error) {
	entries, err := s.current().Messages(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(entries))
	for _, e := range entries {
		out = append(out, entryJSON(e))
	}
	return map[string]any{"messages": out}, nil
}

// entryJSON renders a conversation entry as a message with a "role".
func entryJSON(e *messages.Entry) map[string]any {
	switch {
	case e.GetUser() != nil:
		return map[string]any{"role": "user", "content": e.GetUser().GetText(), "timestamp": e.GetUser().GetTimestampMs()}
	case e.GetAssistant() != nil:
		m := toJSON(e.GetAssistant())
		m["role"] = "assistant"
		return m
	case e.GetToolResult() != nil:
		m := toJSON(e.GetToolResult())
		m["role"] = "tool_result"
		return m
	}
	m := toJSON(e.GetModelChange())
	m["role"] = "model_change"
	return m
}

func (s *Server) setModel(ctx context.Context, line []byte) (any, error) {
	var c struct {
		Provider string `json:"provider"`
		ModelID  string `json:"modelId"`
	}
	if err := decode(line, &c, "provider", "modelId"); err != nil {
		return nil, err
	}
	if err := s.current().SetModel(ctx, c.Provider+"/"+c.ModelID); err != nil {
		return nil, err
	}
	return map[string]any{"provider": c.Provider, "id": c.ModelID}, nil
}

func (s *Server) newSession(ctx context.Context, _ []byte) (any, error) {
	old := s.current()
	old.Abort()
	s.prompts.Wait()
	s.waitSettledWritten(5 * time.Second)
	s.closeSession(ctx)
	if err := s.startSession(ctx); err != nil {
		return nil, err
	}
	return map[string]any{"sessionId": s.current().ID()}, nil
}
