// Package messages holds the protobuf protocol of MusePi: assistant messages,
// retry settings, session events and actor requests. It has no logic.
package messages

//go:generate sh genproto.sh
