package musepi

// FromWireEntries lets the external tests read a history store's wire
// entries as the API's entries.
var FromWireEntries = fromWireEntries

// HasActor reports whether the session's actor runs (false once it has
// passivated, or before its first message).
func HasActor(s *Session) bool { return s.local.pid.Load() != nil }
