// Package zslog takes zerolog's output into a log/slog handler, so that the
// runtime's internals, which log with zerolog, reach an embedder's
// *slog.Logger (musepi.WithLogger).
package zslog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/rs/zerolog"
)

// Logger is a zerolog.Logger whose events are records of h, at the lowest
// level h handles (zerolog.Disabled when it handles none).
func Logger(h slog.Handler) zerolog.Logger {
	return zerolog.New(writer{h: h}).Level(minLevel(h))
}

// levels pairs zerolog's levels with slog's, lowest first.
var levels = []struct {
	z zerolog.Level
	s slog.Level
}{
	{zerolog.TraceLevel, slog.LevelDebug - 4},
	{zerolog.DebugLevel, slog.LevelDebug},
	{zerolog.InfoLevel, slog.LevelInfo},
	{zerolog.WarnLevel, slog.LevelWarn},
	{zerolog.ErrorLevel, slog.LevelError},
	{zerolog.FatalLevel, slog.LevelError + 4},
	{zerolog.PanicLevel, slog.LevelError + 8},
}

func minLevel(h slog.Handler) zerolog.Level {
	for _, l := range levels {
		if h.Enabled(context.Background(), l.s) {
			return l.z
		}
	}
	return zerolog.Disabled
}

func slogLevel(z zerolog.Level) slog.Level {
	for _, l := range levels {
		if l.z == z {
			return l.s
		}
	}
	return slog.LevelInfo // zerolog.NoLevel: a Log() without level
}

// writer turns each zerolog event (one JSON object) into a slog record.
type writer struct{ h slog.Handler }

func (w writer) Write(p []byte) (int, error) { return w.WriteLevel(zerolog.NoLevel, p) }

// WriteLevel hands the event to the handler: "message" becomes the
// record's message, the other fields its attributes in their order;
// "level" and "time" are the record's own.
func (w writer) WriteLevel(z zerolog.Level, p []byte) (int, error) {
	ctx := context.Background()
	level := slogLevel(z)
	if !w.h.Enabled(ctx, level) {
		return len(p), nil
	}
	msg, attrs, err := fields(p)
	if err != nil {
		return 0, fmt.Errorf("zslog: %w", err)
	}
	rec := slog.NewRecord(time.Now(), level, msg, 0)
	rec.AddAttrs(attrs...)
	if err := w.h.Handle(ctx, rec); err != nil {
		return 0, err
	}
	return len(p), nil
}

// fields decodes one JSON object, keeping the order of its fields.
func fields(p []byte) (msg string, attrs []slog.Attr, err error) {
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", nil, fmt.Errorf("want a JSON object, got %q", bytes.TrimSpace(p))
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", nil, err
		}
		key, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return "", nil, fmt.Errorf("field %q: %w", key, err)
		}
		switch key {
		case zerolog.MessageFieldName:
			msg = fmt.Sprint(v)
		case zerolog.LevelFieldName, zerolog.TimestampFieldName:
		default:
			attrs = append(attrs, slog.Any(key, v))
		}
	}
	return msg, attrs, nil
}

// AtLeast is h restricted to records at level min and above.
func AtLeast(h slog.Handler, min slog.Level) slog.Handler { return atLeast{h, min} }

type atLeast struct {
	slog.Handler
	min slog.Level
}

func (a atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= a.min && a.Handler.Enabled(ctx, l)
}

func (a atLeast) WithAttrs(attrs []slog.Attr) slog.Handler {
	return atLeast{a.Handler.WithAttrs(attrs), a.min}
}

func (a atLeast) WithGroup(name string) slog.Handler {
	return atLeast{a.Handler.WithGroup(name), a.min}
}

// Demoted is h with the records whose message is one of messages lowered
// to level to (and dropped when h does not take that level): for a
// library's routine lines that it logs too high.
func Demoted(h slog.Handler, to slog.Level, messages ...string) slog.Handler {
	set := make(map[string]bool, len(messages))
	for _, m := range messages {
		set[m] = true
	}
	return demoted{h, to, set}
}

type demoted struct {
	slog.Handler
	to       slog.Level
	messages map[string]bool
}

func (d demoted) Handle(ctx context.Context, r slog.Record) error {
	if d.messages[r.Message] && r.Level > d.to {
		if !d.Handler.Enabled(ctx, d.to) {
			return nil
		}
		r.Level = d.to
	}
	return d.Handler.Handle(ctx, r)
}

func (d demoted) WithAttrs(attrs []slog.Attr) slog.Handler {
	return demoted{d.Handler.WithAttrs(attrs), d.to, d.messages}
}

func (d demoted) WithGroup(name string) slog.Handler {
	return demoted{d.Handler.WithGroup(name), d.to, d.messages}
}
