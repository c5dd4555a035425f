// Package pgstore keeps cluster mode's shared durable state in PostgreSQL:
// session histories (a history.Store) whose writes are fenced by activation
// epochs, each session's compact record with durable timers over it, and the
// credential blocks and model cooldowns nodes share. Connect migrates the
// schema; docs/cluster.md describes the tables and the fencing rule.
package pgstore
