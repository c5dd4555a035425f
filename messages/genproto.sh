#!/bin/sh
# Regenerates the Go code from the .proto files in this folder.
# Needs protoc (Debian: protobuf-compiler); protoc-gen-go is built from the
# google.golang.org/protobuf version pinned in go.mod.
set -eu
cd "$(dirname "$0")"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
protoc --plugin=protoc-gen-go="$bin/protoc-gen-go" -I . \
  --go_out=. --go_opt=paths=source_relative *.proto protocol/*.proto
