// Package protocol is the actor protocol of MusePi: the protobuf messages a
// session's handle, the session actor and the shared actors (credentials,
// retry budget, model fallback) send one another, within a process and
// across cluster nodes. Those sent to actors are track.Messages
// (tracked.go), counted in flight on the runtime's clock until their
// receiver has handled them; replies to futures are not. The data they carry (assistant messages, entries) is package
// messages'; the protobuf package stays musepi.v1, so a message's name on
// the wire does not depend on the Go package it lives in.
package protocol
