// Package messages is MusePi's wire data: the protobuf messages that
// history files store (as JSON lines: entries, records), that the RPC
// server writes (as JSON: events) and that the session's core reads and
// writes. It holds no actor addresses and no actor protocol: the messages
// the actors send one another across nodes are package messages/protocol's.
// It has no logic.
//
// It is not the embedding API: package musepi gives embedders Go types
// (musepi.AssistantMessage, musepi.Entry, the events of musepi.Event) and
// converts at the boundary. Only code that forwards the wire format itself
// (the RPC server, a cluster member, a provider adapter) needs this
// package; its messages change with the protocol's version.
package messages

// record.proto is generated from session.Record first (see
// internal/genrecord), and events.proto from the table of events (see
// internal/genevent, which also writes the events' Go types and
// conversions), then every .proto's Go code, protocol/'s included.
//go:generate go run ../internal/genrecord ..
//go:generate go run ../internal/genevent ..
//go:generate sh genproto.sh
