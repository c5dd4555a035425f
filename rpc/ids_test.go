package rpc

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// An id is a string or a number, echoed exactly as sent; a line that is
// not a command answers command "parse", with the id when it has a usable
// one; pi's commands MusePi does not offer fail naming the command.
func TestResponseIDsAndCommands(t *testing.T) {
	cases := []struct {
		line    string
		id      string // the raw JSON of the response's id; "" for none
		command string
		success bool
		err     string // part of the error
	}{
		{`{"id":"a","type":"get_commands"}`, `"a"`, "get_commands", true, ""},
		{`{"id":7,"type":"get_commands"}`, `7`, "get_commands", true, ""},
		{`{"id":1.5e3,"type":"get_commands"}`, `1.5e3`, "get_commands", true, ""},
		{`{"id":true,"type":"get_commands"}`, ``, "parse", false, `"id" must be a string or a number`},
		// A malformed line still names the id its prefix holds.
		{`{"id":"x"`, `"x"`, "parse", false, "malformed command"},
		{`{"id":9,"type":"get_state"`, `9`, "parse", false, "malformed command"},
		{`[1]`, ``, "parse", false, "malformed command"},
		{`{"id":3}`, `3`, "parse", false, `missing "type"`},
		{`{"id":4,"type":7}`, `4`, "parse", false, `"type" must be a string`},
		{`{"id":5,"type":"nope"}`, `5`, "nope", false, `unknown command "nope"`},
		{`{"id":6,"type":"bash","command":"ls"}`, `6`, "bash", false, "bash is not supported by MusePi"},
		{`{"id":8,"type":"export_html"}`, `8`, "export_html", false, "export_html is not supported by MusePi"},
		{`{"id":9,"type":"set_steering_mode","mode":"sometimes"}`, `9`, "set_steering_mode", false, `mode "sometimes"`},
		{`{"id":10,"type":"set_thinking_level","level":"huge"}`, `10`, "set_thinking_level", false, `thinking level "huge"`},
	}
	out := &syncBuffer{}
	s := newServer(t, out)
	ctx := context.Background()
	if err := s.startSession(ctx, s.SessionOptions...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.closeSession(ctx) })
	for _, c := range cases {
		out.mu.Lock()
		out.b.Reset()
		out.mu.Unlock()
		s.handle(ctx, []byte(c.line))
		var r struct {
			ID      json.RawMessage `json:"id"`
			Command string          `json:"command"`
			Success bool            `json:"success"`
			Error   string          `json:"error"`
		}
		lines := out.lines()
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
			t.Fatalf("%s: %v", c.line, err)
		}
		if string(r.ID) != c.id || r.Command != c.command || r.Success != c.success || !strings.Contains(r.Error, c.err) {
			t.Errorf("%s → id %s command %q success %t error %q; want id %s command %q success %t error ~%q",
				c.line, r.ID, r.Command, r.Success, r.Error, c.id, c.command, c.success, c.err)
		}
	}
}
