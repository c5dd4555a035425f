package musepi

// FromWireEntries lets the external tests read a history store's wire
// entries as the API's entries.
var FromWireEntries = fromWireEntries
