package main

import (
	"bytes"
	"github.com/musepi/musepi/internal/protoname"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed events.proto, event.go and session/event.go are
// what the table of events generates: an event added to the table without
// `go generate ./...` fails here.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the table of events generates: run go generate ./...", path)
		}
	}
}

// The table is checked: a name or field number used twice, or a Go type
// with no wire form, fails generation.
func TestCheck(t *testing.T) {
	for _, tt := range []struct {
		name string
		evs  []event
		want string
	}{
		{"name twice", []event{{name: "a", number: 10}, {name: "a", number: 11}}, "taken"},
		{"number twice", []event{{name: "a", number: 10}, {name: "b", number: 10}}, "taken"},
		{"header number", []event{{name: "a", number: 3}}, "taken"},
		{"no wire form", []event{{name: "a", number: 10, fields: []field{{goName: "X", goType: "float32"}}}}, "no wire form"},
		{"core field of two types", []event{
			{name: "a", number: 10, core: "A", coreFields: []coreField{{"X", "bool", ""}}},
			{name: "b", number: 11, core: "B", coreFields: []coreField{{"X", "string", ""}}},
		}, "core field X"},
	} {
		err := check(tt.evs)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want an error with %q", tt.name, err, tt.want)
		}
	}
	if err := check(events); err != nil {
		t.Errorf("the table: %v", err)
	}
}

func TestNames(t *testing.T) {
	for _, tt := range []struct{ goName, goType, proto, camel string }{
		{"Delay", "time.Duration", "delay_ms", "DelayMs"},
		{"PrimaryCooldownUntil", "time.Time", "primary_cooldown_until_ms", "PrimaryCooldownUntilMs"},
		{"ErrorMessage", "string", "error_message", "ErrorMessage"},
		{"MaxAttempts", "int", "max_attempts", "MaxAttempts"},
	} {
		got := field{goName: tt.goName, goType: tt.goType}.protoName()
		if got != tt.proto || protoname.Camel(got) != tt.camel {
			t.Errorf("%s %s: %s, %s; want %s, %s", tt.goName, tt.goType, got, protoname.Camel(got), tt.proto, tt.camel)
		}
	}
}
