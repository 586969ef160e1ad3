package api_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// Enrolments with guessed join tokens from one address: those past the
// enrolment pace (500 at once, then 20 a second) were refused 429 with
// nothing written or counted, so the record said 502 of 560 guesses.
func TestEnrol_ThrottledRefusalsAreOnTheRecord(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	const tries = 560
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range tries {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			body := fmt.Sprintf(`{"join_token":"guess%d","name":"m%d","os":"linux","arch":"amd64","host_version":"1.0.0","schema":"1"}`, i, i)
			resp, err := http.Post(e.URL+"/api/v1/enroll", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[http.StatusTooManyRequests] == 0 {
		t.Fatalf("no enrolment was throttled: %v", codes)
	}
	if err := e.Ctl.Server.RecordPendingRefusals(t.Context()); err != nil {
		t.Fatal(err)
	}
	total := 0
	more := regexp.MustCompile(`(\d+) more refused`)
	for _, ev := range audited(e) {
		if ev.Action != "enroll-refused" {
			continue
		}
		if m := more.FindStringSubmatch(ev.Detail); m != nil {
			n, _ := strconv.Atoi(m[1])
			total += n
			if !strings.Contains(ev.Detail, "none since") {
				total++ // the row's own refusal, with the count of those before it
			}
		} else {
			total++
		}
	}
	if total != tries {
		t.Fatalf("%d enrolments refused (%v); the record accounts for %d of them", tries, codes, total)
	}
}
