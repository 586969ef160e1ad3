package models

import "testing"

func TestKeeps(t *testing.T) {
	k := Keeps{Generation: 9, AppliedGeneration: 7, FinishedGeneration: 8, LatestSend: "s9b", LatestSendGeneration: 9,
		LatestReport: 40, LatestApplied: 31, LatestAppliedV1: 22, ReportSends: []string{"s8", "s7", "s4"}, ReportGenerations: []int64{8, 7, 4},
		LatestDeclared: 10, SentGenerations: []int64{3}}
	sends := []struct {
		name string
		id   string
		gen  int64
		keep bool
	}{
		{"Latest", "s9b", 9, true},
		{"OfTheCurrentGeneration", "s9a", 9, true},
		{"OfTheAppliedGeneration", "s7old", 7, true},
		{"NamedByTheLatestReport", "s8", 8, true},
		{"NamedByTheLatestAppliedSchema1Report", "s4", 4, true},
		// The last its host finished (it refused 8), whose send its polls
		// name, though no kept report names it.
		{"OfTheFinishedGeneration", "s8c", 8, true},
		{"Older", "s5", 5, false},
		{"AnotherOfAnOldGeneration", "s6b", 6, false},
	}
	for _, c := range sends {
		t.Run("Send"+c.name, func(t *testing.T) {
			if got := k.KeepSend(c.id, c.gen); got != c.keep {
				t.Fatalf("KeepSend(%s, %d) = %v", c.id, c.gen, got)
			}
		})
	}
	for id, keep := range map[int64]bool{40: true, 31: true, 22: true, 30: false, 1: false} {
		if got := k.KeepReport(id); got != keep {
			t.Errorf("KeepReport(%d) = %v", id, got)
		}
	}
	// 3: composed long ago, sent by a send still on record.
	for gen, keep := range map[int64]bool{10: true, 9: true, 8: true, 7: true, 6: false, 4: true, 3: true, 1: false} {
		if got := k.KeepDeclaration(gen); got != keep {
			t.Errorf("KeepDeclaration(%d) = %v", gen, got)
		}
	}
	t.Run("NoAppliedReport", func(t *testing.T) {
		k := Keeps{LatestReport: 3}
		if k.KeepReport(0) {
			t.Fatal("a machine with no applied report keeps report 0")
		}
	})
}
