// Package messages is MusePi's wire protocol: the protobuf messages that
// the actors exchange (within a process and across cluster nodes), that
// history files store (as JSON lines) and that the RPC server writes (as
// JSON). It has no logic.
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
// conversions), then every .proto's Go code.
//go:generate go run ../internal/genrecord ..
//go:generate go run ../internal/genevent ..
//go:generate sh genproto.sh
