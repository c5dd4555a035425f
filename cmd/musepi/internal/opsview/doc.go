// Package opsview arranges what an operator sees of a cluster: the
// sessions with their owners, epochs and phases (`musepi sessions`), a
// session's history as text lines (`musepi history show`) and the members
// and leases (`musepi cluster status`), as tables or JSON. It reads
// nothing itself: the commands read etcd, the nodes and the database
// (pgstore.Inspect) and hand it what they found.
//
// It is part of the command, not of the runtime: only cmd/musepi imports
// it, and it imports the cluster's packages (cluster, cluster/pgstore),
// never the other way round.
package opsview
