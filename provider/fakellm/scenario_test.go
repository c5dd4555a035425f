package fakellm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBadScenarios(t *testing.T) {
	rule := func(respond string) string {
		return `{"rules": [{"match": {}, "respond": ` + respond + `}]}`
	}
	tests := []struct {
		name string
		doc  string
		path string // the field the error names ("" for document-level)
		msg  string // substring of the message
	}{
		{"status out of range", `{"rules": [{"respond": {"text": "ok"}}, {"respond": {"status": 700}}]}`,
			"rules[1].respond.status", "must be 100-599, got 700"},
		{"status too low", rule(`{"status": 99}`), "rules[0].respond.status", "must be 100-599, got 99"},
		{"status as string", rule(`{"status": "429"}`), "rules[0].respond.status", "must be an integer"},
		{"status fractional", rule(`{"status": 429.5}`), "rules[0].respond.status", "must be an integer"},
		{"unknown top field", `{"rulez": []}`, "rulez", "unknown field"},
		{"unknown match field", `{"rules": [{"match": {"modle": "m"}, "respond": {}}]}`, "rules[0].match.modle", "unknown field"},
		{"unknown respond field", rule(`{"txt": "hi"}`), "rules[0].respond.txt", "unknown field"},
		{"unknown rule field", `{"rules": [{"respond": {}, "when": 1}]}`, "rules[0].when", "unknown field"},
		{"unknown tool_call field", rule(`{"tool_call": {"name": "f", "args": {}}}`), "rules[0].respond.tool_call.args", "unknown field"},
		{"unknown default field", `{"default": {"txt": "x"}}`, "default.txt", "unknown field"},
		{"bad api", `{"rules": [{"match": {"api": "openai"}, "respond": {}}]}`, "rules[0].match.api", `unknown api "openai"`},
		{"negative from_ms", `{"rules": [{"match": {"from_ms": -1}, "respond": {}}]}`, "rules[0].match.from_ms", "must not be negative"},
		{"negative first", `{"rules": [{"match": {"first": -2}, "respond": {}}]}`, "rules[0].match.first", "must not be negative"},
		{"empty window", `{"rules": [{"match": {"from_ms": 500, "to_ms": 500}, "respond": {}}]}`, "rules[0].match.to_ms", "must be greater than from_ms"},
		{"negative chunks", rule(`{"text": "x", "chunks": -1}`), "rules[0].respond.chunks", "must not be negative"},
		{"negative delay", rule(`{"delay_ms": -5}`), "rules[0].respond.delay_ms", "must not be negative"},
		{"negative cut_after", rule(`{"cut_after": -1}`), "rules[0].respond.cut_after", "must not be negative"},
		{"negative stall", rule(`{"stall_ms": -1}`), "rules[0].respond.stall_ms", "must not be negative"},
		{"error and stream", rule(`{"status": 429, "text": "hi"}`), "rules[0].respond.text", `cannot be combined with error field "status"`},
		{"preset and stream", rule(`{"preset": "overloaded", "cut_after": 1}`), "rules[0].respond.cut_after", `error field "preset"`},
		{"stream_error and text", rule(`{"stream_error": true, "text": "hi"}`), "rules[0].respond.text", "stream_error"},
		{"forget_previous and error", rule(`{"forget_previous": true, "status": 500}`), "rules[0].respond.forget_previous", "cannot be combined"},
		{"unknown preset", rule(`{"preset": "meltdown"}`), "rules[0].respond.preset", `unknown preset "meltdown"`},
		{"unknown stop", rule(`{"text": "x", "stop": "halt"}`), "rules[0].respond.stop", `unknown stop "halt"`},
		{"refusal and text", rule(`{"refusal": "no", "text": "x"}`), "rules[0].respond.refusal", "cannot be combined with text"},
		{"tool without name", rule(`{"tool_call": {"arguments": {}}}`), "rules[0].respond.tool_call.name", "required"},
		{"tool arguments number", rule(`{"tool_call": {"name": "f", "arguments": 3}}`), "rules[0].respond.tool_call.arguments", "must be an object"},
		{"header number", rule(`{"status": 429, "headers": {"retry-after": 3}}`), "rules[0].respond.headers.retry-after", "must be a string"},
		{"header name", rule(`{"status": 429, "headers": {"retry after": "3"}}`), "rules[0].respond.headers", "invalid header name"},
		{"header value newline", rule(`{"status": 429, "headers": {"x-a": "1\r\nx-b: 2"}}`), "rules[0].respond.headers.x-a", "CR, LF"},
		{"stall_after alone", rule(`{"stall_after": 2}`), "rules[0].respond.stall_after", "needs stall_ms"},
		{"stream_error not bool", rule(`{"stream_error": "yes"}`), "rules[0].respond.stream_error", "must be true or false"},
		{"rules not array", `{"rules": {}}`, "rules", "must be an array"},
		{"rule not object", `{"rules": [3]}`, "rules[0]", "must be an object"},
		{"respond missing", `{"rules": [{"match": {}}]}`, "rules[0].respond", "missing"},
		{"name not string", `{"rules": [{"name": 1, "respond": {}}]}`, "rules[0].name", "must be a string"},
		{"duplicate names", `{"rules": [{"name": "a", "respond": {}}, {"name": "a", "respond": {}}]}`, "rules[1].name", "duplicate"},
		{"reserved name", `{"rules": [{"name": "default", "respond": {}}]}`, "rules[0].name", "reserved"},
		{"bad default", `{"default": {"status": 1000}}`, "default.status", "must be 100-599"},
		{"syntax error", "{\n  \"rules\": [}\n", "", "invalid JSON at line 2, column 13: invalid character"},
		{"truncated", `{"rules": [`, "", "unexpected end"},
		{"trailing data", `{} {}`, "", "data after the top-level value"},
		{"empty", "  ", "", "empty scenario"},
		{"top-level array", `[]`, "", "scenario must be an object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseScenario([]byte(tc.doc))
			if err == nil {
				t.Fatalf("accepted: %s", tc.doc)
			}
			var se *ScenarioError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T) is not a *ScenarioError", err, err)
			}
			if se.Path != tc.path || !strings.Contains(se.Msg, tc.msg) {
				t.Errorf("error %q\nwant path %q and a message with %q", err, tc.path, tc.msg)
			}
			if tc.path != "" && !strings.HasPrefix(err.Error(), tc.path+": ") {
				t.Errorf("error %q does not start with the field path", err)
			}
		})
	}
}

func TestGoodScenario(t *testing.T) {
	sc := mustParse(t, `{
		"rules": [
			{"name": "outage", "match": {"api": "anthropic", "key": "key-a", "model": "m1", "from_ms": 0, "to_ms": 5000, "first": 2},
			 "respond": {"status": 429, "headers": {"retry-after": "3"}, "error_type": "rate_limit_error", "message": "Rate limited"}},
			{"match": {"model": "tool"}, "respond": {"tool_call": {"name": "f", "arguments": "{\"a\": 1}"}, "cut_after": 0}},
			{"match": {"model": "tool2"}, "respond": {"tool_call": {"name": "f", "arguments": {"a": [1, 2]}}}},
			{"match": {"model": "se"}, "respond": {"stream_error": true, "preset": "overloaded", "headers": {"x-a": "b"}}},
			{"match": {"model": "fp"}, "respond": {"forget_previous": true, "text": "x", "delay_ms": 5}}
		],
		"default": {"text": "Hello from fakellm"}
	}`)
	r := sc.Rules[0]
	if r.Name != "outage" || r.Match.API != APIAnthropic || r.Match.Key != "key-a" || r.Match.Model != "m1" ||
		r.Match.ToMs != 5000 || r.Match.First != 2 || r.Respond.Status != 429 || r.Respond.Headers["retry-after"] != "3" ||
		r.Respond.ErrorType != "rate_limit_error" || r.Respond.Message != "Rate limited" || r.Respond.kind() != kindError {
		t.Errorf("rule 0: %+v", r)
	}
	if tc := sc.Rules[1].Respond; tc.ToolCall.Arguments != `{"a": 1}` || tc.CutAfter == nil || *tc.CutAfter != 0 {
		t.Errorf("rule 1: %+v", tc)
	}
	if tc := sc.Rules[2].Respond.ToolCall; tc.Arguments != `{"a":[1,2]}` {
		t.Errorf("rule 2 arguments %q", tc.Arguments)
	}
	if k := sc.Rules[3].Respond.kind(); k != kindStreamError {
		t.Errorf("rule 3 kind %v", k)
	}
	if sc.Default.Text != "Hello from fakellm" {
		t.Errorf("default %+v", sc.Default)
	}
}

func TestValidateGoScenario(t *testing.T) {
	sc := &Scenario{Rules: []Rule{{Respond: Respond{Text: "ok"}}, {Respond: Respond{Status: 700}}}}
	if err := sc.Validate(); err == nil || err.Error() != "rules[1].respond.status: must be 100-599, got 700" {
		t.Errorf("Validate = %v", err)
	}
	ok := &Scenario{Rules: []Rule{{Match: Match{Model: "m"}, Respond: Respond{Text: "x", CutAfter: Int(2)}}}}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}

func TestLoadScenario(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) < 3 {
		t.Fatalf("testdata: %v %v", files, err)
	}
	for _, f := range files {
		if _, err := LoadScenario(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"rules": [{"respond": {"status": 700}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadScenario(bad)
	if err == nil || err.Error() != bad+": rules[0].respond.status: must be 100-599, got 700" {
		t.Errorf("LoadScenario(bad) = %v", err)
	}
	if _, err := LoadScenario(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestReadmeExamplesParse(t *testing.T) {
	// Every ```json block of the README that holds a whole scenario (has
	// "rules", "default", "limits" or "capacity" at the top) must parse.
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(b), "```json\n")
	n := 0
	for _, blk := range blocks[1:] {
		doc, _, _ := strings.Cut(blk, "```")
		if !strings.HasPrefix(strings.TrimSpace(doc), "{") || !(strings.Contains(doc, `"rules"`) || strings.Contains(doc, `"default"`) || strings.Contains(doc, `"limits"`) || strings.Contains(doc, `"capacity"`)) {
			continue
		}
		if strings.Contains(doc, "//") { // an annotated snippet, not a file
			continue
		}
		n++
		if _, err := ParseScenario([]byte(doc)); err != nil {
			t.Errorf("README example %d: %v\n%s", n, err, doc)
		}
	}
	if n < 3 {
		t.Errorf("only %d README scenario examples found", n)
	}
}
