package fakellm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/musepi/musepi/provider/fakellm"
)

// FuzzScenario feeds arbitrary documents to ParseScenario. It must never
// panic; it returns exactly one of a scenario and an error; an error has a
// message (the same one every time); a scenario passes Validate, can be
// served by New, and survives a JSON round trip unchanged.
//
// Seeds: the scenario files in testdata/*.json, the f.Add documents below
// and the corpus in testdata/fuzz/FuzzScenario.
func FuzzScenario(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("scenario files: %v, %v", files, err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, doc := range []string{
		// Valid.
		`{}`,
		`{"rules": []}`,
		`{"default": {}}`,
		`{"rules": [{"respond": {}}]}`,
		`{"rules": [{"match": {"api": "openai-chat", "key": "k", "model": "m", "from_ms": 0, "to_ms": 10, "first": 2}, "respond": {"text": "hi", "chunks": 10000, "stop": "length"}}]}`,
		`{"default": {"tool_call": {"name": "f", "arguments": "not json"}}}`,
		`{"default": {"tool_call": {"name": "f", "arguments": {"a": [1, {"b": null}]}}, "stop": "tool_calls"}}`,
		`{"default": {"refusal": "no", "stop": "content_filter"}}`,
		`{"default": {"stream_error": true, "preset": "overloaded", "message": "m", "headers": {"x-a": "1"}, "delay_ms": 5}}`,
		`{"default": {"status": 599, "error_type": "t", "error_code": "c", "message": "{model} {key}"}}`,
		`{"default": {"forget_previous": true, "cut_after": 0, "stall_ms": 1, "stall_after": 1, "chunk_delay_ms": 1}}`,
		"{\"rules\":[{\"name\":\"\u00e9\",\"respond\":{\"text\":\"\\ud800\\u0000\"}}]}",
		`{"rules": [{"respond": {"cut_after": -0}}]}`,
		`{"limits": [{"key": "k", "model": "m", "rpm": 1}, {"key": "k", "tpm": 1000000000}, {"rpm": 600, "tpm": 200000}]}`,
		// Invalid.
		``,
		` `,
		`null`,
		`[]`,
		`"x"`,
		`{`,
		`{} {}`,
		`{"rules": [`,
		`{"rules": null}`,
		`{"default": null}`,
		`{"rules": [{"respond": {"status": 1e3}}]}`,
		`{"rules": [{"respond": {"status": 99999999999999999999}}]}`,
		`{"rules": [{"respond": {"chunks": 2147483648}}]}`,
		`{"rules": [{"respond": {"text": "a", "status": 500}}]}`,
		`{"rules": [{"name": "(x)", "respond": {}}]}`,
		`{"rules": [{"name": "a", "respond": {}}, {"name": "a", "respond": {}}]}`,
		`{"rules": [{"match": {"from_ms": 5, "to_ms": 5}, "respond": {}}]}`,
		`{"default": {"tool_call": {"name": "f", "arguments": null}}}`,
		`{"default": {"tool_call": {"name": "f", "arguments": {"a": }}}}`,
		`{"default": {"headers": {"bad name": "v"}}}`,
		`{"default": {"headers": {"x-a": "1\r\n"}}}`,
		`{"rules": [], "rules": 5}`,
		`{"default": {"text": "a", "text": 1}}`,
		`{"limits": {}}`,
		`{"limits": [{}]}`,
		`{"limits": [{"rpm": 1}, {"key": "k", "rpm": 2}]}`,
		`{"limits": [{"rpm": -1, "tpm": 1e3}]}`,
		"\xef\xbb\xbf{}",
		"{\"default\": {\"text\": \"\xff\"}}",
	} {
		f.Add([]byte(doc))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := fakellm.ParseScenario(data)
		if (sc == nil) == (err == nil) {
			t.Fatalf("ParseScenario = %v, %v: want exactly one of a scenario and an error", sc, err)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("error with an empty message: %#v", err)
			}
			if _, again := fakellm.ParseScenario(data); again == nil || again.Error() != err.Error() {
				t.Fatalf("not deterministic: %v, then %v", err, again)
			}
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("parsed, but Validate: %v", err)
		}
		srv := fakellm.New(sc)
		if srv == nil {
			t.Fatal("New returned nil")
		}
		if st := srv.Stats(); st.Total != 0 || st.Active != 0 {
			t.Errorf("fresh server stats %+v", st)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}

		// What Go makes of a parsed scenario is itself a valid scenario
		// file that parses back to the same thing.
		out, err := json.Marshal(sc)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		sc2, err := fakellm.ParseScenario(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		out2, err := json.Marshal(sc2)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		if string(out) != string(out2) {
			t.Fatalf("round trip changed the scenario:\n%s\n%s", out, out2)
		}
	})
}

// TestScenarioFuzzSeeds keeps the checked-in corpus meaningful: the
// valid_* files parse, the bad_* ones do not.
func TestScenarioFuzzSeeds(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzScenario", "*"))
	if err != nil || len(files) < 5 {
		t.Fatalf("seeds: %v, %v", files, err)
	}
	for _, name := range files {
		data := readCorpusBytes(t, name)
		_, err := fakellm.ParseScenario(data)
		base := filepath.Base(name)
		switch {
		case strings.HasPrefix(base, "valid_") && err != nil:
			t.Errorf("%s: %v", base, err)
		case strings.HasPrefix(base, "bad_") && err == nil:
			t.Errorf("%s: parsed", base)
		case testing.Verbose():
			t.Logf("%s: %v", base, err)
		}
	}
}

// readCorpusBytes reads a "go test fuzz v1" file holding one []byte.
func readCorpusBytes(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	header, body, _ := strings.Cut(string(raw), "\n")
	body = strings.TrimSpace(body)
	if header != "go test fuzz v1" || !strings.HasPrefix(body, "[]byte(") || !strings.HasSuffix(body, ")") {
		t.Fatalf("%s: not a corpus file of one []byte", name)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(body, "[]byte("), ")"))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return []byte(s)
}
