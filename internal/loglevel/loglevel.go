// Package loglevel wraps log/slog handlers by level: one that keeps only
// the records at a level and above, one that lowers the level of the
// records of given messages.
package loglevel

import (
	"context"
	"log/slog"
)

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
