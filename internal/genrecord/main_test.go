package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/musepi/musepi/internal/protoname"
)

// The committed record.proto and record_wire.go are what the record's Go
// definition generates: a field added to session.Record (with its wire
// tag) without `go generate ./...` fails here.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	proto, src, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{protoPath: proto, goPath: src} {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what session.Record generates: run go generate ./...", path)
		}
	}
}

func TestNames(t *testing.T) {
	for _, tt := range []struct{ goName, goType, proto, camel string }{
		{"PrimaryUntil", "time.Time", "primary_until_unix_nano", "PrimaryUntilUnixNano"},
		{"Delay", "time.Duration", "delay_ns", "DelayNs"},
		{"HistorySeq", "uint64", "history_seq", "HistorySeq"},
		{"ErrText", "string", "err_text", "ErrText"},
	} {
		got := protoName(tt.goName, tt.goType)
		if got != tt.proto || protoname.Camel(got) != tt.camel {
			t.Errorf("%s %s: %s, %s; want %s, %s", tt.goName, tt.goType, got, protoname.Camel(got), tt.proto, tt.camel)
		}
	}
}
