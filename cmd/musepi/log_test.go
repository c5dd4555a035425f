package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/provider/fakellm"
)

// The command logs plain text lines (no colour codes off a terminal) by
// default, JSON objects with --log-format json, and refuses other formats.
func TestLogFormat(t *testing.T) {
	tests := []struct {
		format string
		check  func(t *testing.T, out string)
	}{
		{"text", func(t *testing.T, out string) {
			if strings.Contains(out, "\x1b[") || !strings.Contains(out, "WRN history write failed session=s1") {
				t.Errorf("text log %q: want a plain line", out)
			}
		}},
		{"json", func(t *testing.T, out string) {
			var obj map[string]any
			if err := json.Unmarshal([]byte(out), &obj); err != nil || obj["level"] != "warn" || obj["message"] != "history write failed" || obj["session"] != "s1" {
				t.Errorf("json log %q: %v", out, err)
			}
		}},
	}
	saved := stderr
	t.Cleanup(func() { stderr = saved })
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			var buf bytes.Buffer
			stderr = &buf
			log, err := (&setupFlags{logFormat: tt.format}).logger()
			if err != nil {
				t.Fatal(err)
			}
			log.Info("not shown without -v")
			log.Warn("history write failed", slog.String("session", "s1"))
			tt.check(t, strings.TrimSpace(buf.String()))
		})
	}
	if _, err := (&setupFlags{logFormat: "xml"}).logger(); err == nil || !strings.Contains(err.Error(), `--log-format "xml"`) {
		t.Errorf("--log-format xml: %v", err)
	}
}

// Aborting a streaming prompt, aborting again once it has settled and
// quitting logs no protoactor DeadLetter line, even with -v (debug level).
func TestRPCAbortLogsNoDeadLetter(t *testing.T) {
	bin := buildCommand(t)
	srv := fakellm.New(&fakellm.Scenario{Default: &fakellm.Respond{Text: "a long answer", Chunks: 50, ChunkDelayMs: 20}})
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	var errOut bytes.Buffer
	p := spawnRPCStderr(t, bin, &errOut, "-v", "--provider", "openai", "--base-url", base+"/v1", "--model", "m1")
	for i := range 3 {
		id := func(n int) string { return strconv.Itoa(10*i + n) }
		p.send(`{"id":"` + id(1) + `","type":"prompt","message":"hi"}`)
		p.next("message_update", 10*time.Second)
		p.send(`{"id":"` + id(2) + `","type":"abort"}`)
		p.next("agent_settled", 10*time.Second)
		p.send(`{"id":"` + id(3) + `","type":"abort"}`)
		p.response(id(3))
	}
	p.send(`{"id":"new","type":"new_session"}`) // closes the session: late deliveries to it are dead letters
	p.response("new")
	p.send(`{"id":"x","type":"abort"}`)
	p.response("x")
	if err := p.stop(); err != nil {
		t.Fatalf("musepi rpc: %v\n%s", err, errOut.String())
	}
	if strings.Contains(errOut.String(), "DeadLetter") {
		t.Errorf("dead-letter noise on stderr:\n%s", errOut.String())
	}
}
