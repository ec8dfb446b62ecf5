package coderd

// The audit journal's import, for its tests in package coderd_test (which
// may import coderdtest; this package may not).
var ImportAuditJournal = importAuditJournal

const (
	JournalOffsetKey = journalOffsetKey
	JournalNewerKey  = journalNewerKey
)
