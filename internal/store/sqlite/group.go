package sqlite

// StartGroupCommit implements store.Store, and does nothing: group commit
// lets many writes share one Postgres transaction, whose commit (a WAL flush
// and the transaction's overhead), not its statements, bounds Postgres's
// throughput. SQLite has one writer: writes wait for it in turn, and each is
// one transaction, as long as one fsync takes, whether or not others wait.
// Merging them would save fsyncs but add a second path for every write to
// get right, for a store meant for development and single processes.
// CommitWorkflowTaskParams.ClaimNext, honoured only in groups, is ignored.
func (s *Store) StartGroupCommit(flushers, max int) (stop func()) {
	return func() {}
}
