// Package timers is a runtime's timer service: the one owner of every
// backoff of its sessions, whether the session waits with its actor
// (live), without it (passivated), or on a store that keeps its due time
// for any node (durable).
package timers
