package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// parseCommand reads a line's "id" and "type". The id may be a string or a
// number and is echoed exactly as sent. When the line is not a command
// object, the error says why and the returned command still carries the
// id if the line holds a usable one, so the error response can name it.
func parseCommand(line []byte) (command, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return command{}, fmt.Errorf("malformed command: %w", err)
	}
	var c command
	if id, ok := raw["id"]; ok && string(id) != "null" {
		if !validID(id) {
			return command{}, errors.New(`"id" must be a string or a number`)
		}
		c.ID = id
	}
	if t, ok := raw["type"]; ok && string(t) != "null" {
		if err := json.Unmarshal(t, &c.Type); err != nil {
			return c, errors.New(`"type" must be a string`)
		}
	}
	return c, nil
}

// validID reports whether a raw JSON value is a string or a number.
func validID(id json.RawMessage) bool {
	id = bytes.TrimSpace(id)
	if len(id) == 0 {
		return false
	}
	if id[0] == '"' {
		var s string
		return json.Unmarshal(id, &s) == nil
	}
	var n json.Number
	return json.Unmarshal(id, &n) == nil
}
