package pgstore

// StopHeartbeat stops renewing the node's lease without closing the Store:
// the node looks dead to the others once the lease runs out.
func (s *Store) StopHeartbeat() {
	s.stop()
	s.beating.Wait()
}

// LoadMigrations exposes loadMigrations to the tests.
var LoadMigrations = loadMigrations
