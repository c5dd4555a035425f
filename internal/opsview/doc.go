// Package opsview arranges what an operator sees of a cluster: the
// sessions with their owners, epochs and phases (`musepi sessions`), a
// session's history as text lines (`musepi history show`) and the members
// and leases (`musepi cluster status`), as tables or JSON. It reads
// nothing itself: the commands read etcd, the nodes and the database
// (pgstore.Inspect) and hand it what they found.
package opsview
