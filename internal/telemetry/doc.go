// Package telemetry turns a runtime's session events and provider calls
// into OpenTelemetry metrics and traces: it subscribes to the wire events
// (*messages.SessionEvent) and wraps each provider.Provider. It is set up
// only when a meter or tracer provider is given, so it costs nothing off.
package telemetry
