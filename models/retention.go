package models

import (
	"slices"
	"time"
)

// DefaultKeepSends is how long sends, reports and declarations are kept
// (--keep-sends) when nothing else is said; what a machine still needs is
// kept past it (Keeps).
const DefaultKeepSends = 90 * 24 * time.Hour

// Keeps is what one machine still needs of its records, whatever their
// age: retention removes an old send, report or declaration only when
// none of these names it. Read from the store for the machines whose old
// rows are being removed, in the transaction that removes them.
type Keeps struct {
	// Generation is the machine's current generation; AppliedGeneration
	// the last it applied; FinishedGeneration the last its host finished
	// (applied, refused or rejected), whose send the host names in its
	// polls (X-Mesh-Finished-Send): removed, the host would be judged to
	// have another timeline's declaration.
	Generation, AppliedGeneration, FinishedGeneration int64
	// LatestSend is the id of the machine's newest send and
	// LatestSendGeneration its generation.
	LatestSend           string
	LatestSendGeneration int64
	// LatestReport is the id of its newest report; LatestApplied that of
	// its newest report with outcome applied (0: none); LatestAppliedV1
	// that of its newest applied report whose declaration was composed in
	// schema 1, which every host decodes: what a held-back declaration
	// carries when a host is rolled back past content it applied
	// (HoldBack).
	LatestReport, LatestApplied, LatestAppliedV1 int64
	// ReportSends and ReportGenerations are the sends (and their
	// generations) those reports name.
	ReportSends       []string
	ReportGenerations []int64
	// LatestDeclared is the newest generation declared for it.
	LatestDeclared int64
	// MovedLately says its generation moved within UnsentKept: an
	// instance not yet told may still answer a poll with a generation
	// before it.
	MovedLately bool
	// SentGenerations are the generations of it that have a send on
	// record (read only when its declarations are judged): a send shows
	// what it carried as long as it is kept, however long ago that was
	// composed.
	SentGenerations []int64
}

// KeepSend says whether a send must stay: the machine's latest, one of a
// generation still current, last applied or last finished (so every 200
// that can still matter has its row), or one a kept report names.
func (k *Keeps) KeepSend(id string, generation int64) bool {
	if id == k.LatestSend || generation == k.Generation || generation == k.AppliedGeneration || generation == k.FinishedGeneration {
		return true
	}
	for _, s := range k.ReportSends {
		if s == id {
			return true
		}
	}
	return false
}

// KeepReport says whether a report must stay: the machine's latest, its
// latest applied one (which says what it runs and which send it was), and
// its latest applied one of a schema-1 declaration.
func (k *Keeps) KeepReport(id int64) bool {
	return id == k.LatestReport || (k.LatestApplied != 0 && id == k.LatestApplied) ||
		(k.LatestAppliedV1 != 0 && id == k.LatestAppliedV1)
}

// UnsentKept is how long after a machine's generation moved the
// declarations past what its host finished are kept, sent or not: far
// longer than an instance goes without hearing of a bump (its resync) and
// a poll takes from reading its declaration to writing its send row.
const UnsentKept = 10 * time.Minute

// KeepDeclaration says whether the declaration of a generation must stay:
// the latest, the current and the applied one, that of every send on
// record, so a send still shows what it carried, and, while the
// generation moved lately, every one past what the host last applied or
// finished: an instance that has not yet heard of the newer generation
// may still answer a poll with it (its send row written after this judged
// it), and the host apply it. Not for good: a host that never comes back
// would keep every declaration composed for its machine.
func (k *Keeps) KeepDeclaration(generation int64) bool {
	switch generation {
	case k.LatestDeclared, k.Generation, k.AppliedGeneration, k.LatestSendGeneration:
		return true
	}
	if k.MovedLately && generation > max(k.AppliedGeneration, k.FinishedGeneration) {
		return true
	}
	return slices.Contains(k.ReportGenerations, generation) || slices.Contains(k.SentGenerations, generation)
}
