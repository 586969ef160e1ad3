package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestReports_APageReadsAtMostItsBytes: a page of a machine's reports
// reads no more than store.MaxReportsPage of bodies (always one report),
// says it was cut, and the next page goes on from its last report, on
// both engines' measures of a body's size.
func TestReports_APageReadsAtMostItsBytes(t *testing.T) {
	ctx := context.Background()
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		m := enrolAs(t, s, "m1", "enrol-m1")
		insert := func(pad int) int64 {
			body := `{"generation":0,"outcome":"refused","reason":"x","pad":"` + strings.Repeat("é", pad/2) + `"}`
			r, err := models.DecodeReport([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			row, err := s.InsertReport(ctx, m.ID, r, []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			return row.ID
		}
		// Newest first: a small one, two of 1.5 MiB, one of 3 MiB, a small one.
		want := [][]int64{}
		oldest := insert(10)
		big := insert(3 << 20)
		b1, b2 := insert(3<<19), insert(3<<19)
		newest := insert(10)
		want = append(want, []int64{newest, b2, b1}, []int64{big, oldest})
		var got [][]int64
		cursor := int64(0)
		for {
			rs, cut, err := s.Reports(ctx, m.ID, 10, cursor)
			if err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for _, r := range rs {
				ids = append(ids, r.ID)
			}
			got = append(got, ids)
			if !cut {
				break
			}
			cursor = ids[len(ids)-1]
		}
		if len(got) != len(want) || !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
			t.Fatalf("pages %v, want %v (bodies of 10 B, 1.5 MiB, 1.5 MiB, 3 MiB and 10 B, counted in bytes)", got, want)
		}
	})
}
