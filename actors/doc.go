// Package actors runs MusePi sessions on protoactor-go: the session actor
// and the credential and model-fallback actors it asks; its backoffs wait
// in the runtime's timer service (package timers).
// Every message between them is a protobuf message from package messages.
package actors
