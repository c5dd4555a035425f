// Package cluster runs MusePi's shared actors on protoactor-go's cluster:
// the credentials kind (one activation per provider, holding its keys and
// retry budget) and the model-fallback kind (one per role), reachable from
// every node through local routers, with their blocks mirrored to every
// node's views.
package cluster
