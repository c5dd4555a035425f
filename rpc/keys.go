package rpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/musepi/musepi/internal/plaintext"
)

// knownKeys are the keys of every command, spelled exactly. Go's
// encoding/json matches keys without regard to case, so checkKeys rejects
// what it would fold before a command is decoded.
var knownKeys = []string{"enabled", "id", "level", "message", "mode", "modelId", "name", "provider",
	"sessionPath", "streamingBehavior", "type"}

// checkKeys rejects a command object with two keys that differ only by case
// (or not at all), or a key that is a known key spelled with other case.
// Malformed JSON is left to the decoder that follows.
func checkKeys(line []byte) error {
	var seen []string
	var problem error
	topLevel(line, func(key string, _ json.Token) bool {
		for _, k := range seen {
			if strings.EqualFold(k, key) {
				problem = fmt.Errorf("duplicate key %q (also %q; keys are case-sensitive)", key, k)
				return false
			}
		}
		seen = append(seen, key)
		for _, k := range knownKeys {
			if k != key && strings.EqualFold(k, key) {
				problem = fmt.Errorf("unknown key %q (keys are case-sensitive: did you mean %q?)", key, k)
				return false
			}
		}
		return true
	})
	return problem
}

// exactFields reads the "id" (a string or a number, as sent) and "type" of
// a command, by their exact keys, from a line or the prefix of one (an
// over-long line): what is cut off or malformed is left out.
func exactFields(line []byte) (id json.RawMessage, typ string) {
	topLevel(line, func(key string, v json.Token) bool {
		switch v := v.(type) {
		case string:
			if key == "id" && id == nil {
				id, _ = json.Marshal(v)
			}
			if key == "type" && typ == "" {
				typ = v
			}
		case json.Number:
			if key == "id" && id == nil {
				id = json.RawMessage(v)
			}
		}
		return true
	})
	return id, typ
}

// checkID rejects an id string holding control characters.
func checkID(id json.RawMessage) error {
	var s string
	if len(id) == 0 || id[0] != '"' || json.Unmarshal(id, &s) != nil {
		return nil // absent, or a number
	}
	return plaintext.Check("id", s)
}

// topLevel calls fn with each key of the JSON object in data and its value
// (a json.Token; json.Delim for an object or array, which is skipped), in
// order, until fn returns false or data ends or stops being valid JSON.
func topLevel(data []byte, fn func(key string, value json.Token) bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return
		}
		v, err := dec.Token()
		if err != nil {
			return
		}
		if _, ok := v.(json.Delim); ok && !skip(dec) {
			return
		}
		if key, _ := k.(string); !fn(key, v) {
			return
		}
	}
}

// skip reads past the object or array just opened; false when the input
// ends or breaks first.
func skip(dec *json.Decoder) bool {
	depth := 1
	for depth > 0 {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return true
}
