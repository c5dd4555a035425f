// Package actors runs MusePi sessions on protoactor-go: the session actor,
// its retry child, and the credential and model-fallback actors they ask.
// Every message between them is a protobuf message from package messages.
package actors
