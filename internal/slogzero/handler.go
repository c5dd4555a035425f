// Package slogzero bridges log/slog (which protoactor-go logs through) into
// a zerolog logger, so the whole runtime logs through one logger.
package slogzero

import (
	"context"
	"log/slog"

	"github.com/rs/zerolog"
)

// Handler is a slog.Handler writing to a zerolog.Logger.
type Handler struct {
	log   zerolog.Logger
	attrs []slog.Attr
	group string
}

// New returns a slog.Logger that writes to log.
func New(log zerolog.Logger) *slog.Logger { return slog.New(&Handler{log: log}) }

// Enabled reports whether log writes at level.
func (h *Handler) Enabled(_ context.Context, level slog.Level) bool {
	return h.log.GetLevel() <= zerologLevel(level)
}

// Handle writes one record.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	ev := h.log.WithLevel(zerologLevel(r.Level))
	if ev == nil {
		return nil
	}
	for _, a := range h.attrs {
		ev = addAttr(ev, h.group, a)
	}
	r.Attrs(func(a slog.Attr) bool {
		ev = addAttr(ev, h.group, a)
		return true
	})
	ev.Msg(r.Message)
	return nil
}

// WithAttrs returns a handler that adds attrs to every record.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

// WithGroup returns a handler that prefixes keys with name.
func (h *Handler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}

func addAttr(ev *zerolog.Event, group string, a slog.Attr) *zerolog.Event {
	key := a.Key
	if group != "" {
		key = group + "." + key
	}
	return ev.Interface(key, a.Value.Resolve().Any())
}

func zerologLevel(l slog.Level) zerolog.Level {
	switch {
	case l >= slog.LevelError:
		return zerolog.ErrorLevel
	case l >= slog.LevelWarn:
		return zerolog.WarnLevel
	case l >= slog.LevelInfo:
		return zerolog.InfoLevel
	}
	return zerolog.DebugLevel
}
