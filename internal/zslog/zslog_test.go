package zslog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestLoggerWritesRecords(t *testing.T) {
	var buf bytes.Buffer
	h := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})
	log := Logger(h)
	if log.GetLevel() != zerolog.InfoLevel {
		t.Errorf("level %v, want info (the handler's lowest)", log.GetLevel())
	}
	log.Debug().Msg("hidden")
	log.Info().Str("session", "s1").Int("attempt", 2).Msg("retry")
	log.Warn().Err(errors.New("disk full")).Msg("history")
	want := []string{
		`level=INFO msg=retry session=s1 attempt=2`,
		`level=WARN msg=history error="disk full"`,
	}
	if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", buf.String(), strings.Join(want, "\n"))
	}
}

func TestMinLevel(t *testing.T) {
	tests := []struct {
		handler slog.Level
		want    zerolog.Level
	}{
		{slog.LevelDebug, zerolog.DebugLevel},
		{slog.LevelInfo, zerolog.InfoLevel},
		{slog.LevelWarn, zerolog.WarnLevel},
		{slog.LevelError, zerolog.ErrorLevel},
	}
	for _, tt := range tests {
		h := slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: tt.handler})
		if got := minLevel(h); got != tt.want {
			t.Errorf("handler at %v: zerolog level %v, want %v", tt.handler, got, tt.want)
		}
	}
	if got := minLevel(slog.DiscardHandler); got != zerolog.Disabled {
		t.Errorf("discarding handler: %v, want disabled", got)
	}
}

func TestDemoted(t *testing.T) {
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	tests := []struct {
		handler slog.Level
		want    string
	}{
		{slog.LevelWarn, "level=ERROR msg=failure\n"},
		{slog.LevelDebug, "level=DEBUG msg=churn\nlevel=ERROR msg=failure\nlevel=DEBUG msg=quiet\n"},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		h := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tt.handler, ReplaceAttr: noTime})
		log := slog.New(AtLeast(Demoted(h, slog.LevelDebug, "churn", "quiet"), slog.LevelDebug))
		log.Error("churn")
		log.Error("failure")
		log.Debug("quiet")
		if buf.String() != tt.want {
			t.Errorf("handler at %v: got\n%swant\n%s", tt.handler, buf.String(), tt.want)
		}
	}
}
