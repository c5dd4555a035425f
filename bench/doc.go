// Package bench holds MusePi's benchmarks: the footprint of idle sessions
// and the cost of one retry attempt through the actors, on the virtual clock.
// Run them with: go test -run '^$' -bench . -benchmem ./bench/
package bench
