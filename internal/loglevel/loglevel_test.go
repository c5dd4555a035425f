package loglevel

import (
	"bytes"
	"log/slog"
	"testing"
)

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
