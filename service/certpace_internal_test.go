package service

import (
	"errors"
	"testing"
	"time"

	"mesh/models"
)

// TestCertPace_AHostRenewingIsNeverRefused: a resource's certificates are
// paced by its lifetime. A host renewing at two thirds of the shortest
// lifetime a declaration may give (10 s) is never refused over two hours
// — a flat limit of one every 10 s a machine refused one such resource
// after half an hour, and its certificate expired — while asking again
// and again gets three, then waits a third of the lifetime; each resource
// is paced on its own.
func TestCertPace_AHostRenewingIsNeverRefused(t *testing.T) {
	var p certPace
	start := time.Now()
	for _, lifetime := range []time.Duration{models.MinCertificateLifetime, time.Hour, 30 * 24 * time.Hour} {
		every := models.RenewAt(start.Add(lifetime), lifetime).Sub(start)
		for at := time.Duration(0); at < 2*time.Hour && at < 100*every; at += every {
			if err := p.take("m1\x00web.cert "+lifetime.String(), lifetime, start.Add(at)); err != nil {
				t.Fatalf("lifetime %s, renewed every %s: refused at %s: %v", lifetime, every, at, err)
			}
		}
	}
	got := 0
	for range 10 {
		if p.take("m1\x00db.cert", time.Hour, start) == nil {
			got++
		}
	}
	err := p.take("m1\x00db.cert", time.Hour, start)
	var ra *models.RetryAfterError
	if got != 3 || !errors.As(err, &ra) || ra.After < 19*time.Minute || !errors.Is(err, models.ErrTooManyRequests) {
		t.Fatalf("ten asks at once: %d signed; then %v", got, err)
	}
	if err := p.take("m1\x00other.cert", time.Hour, start); err != nil {
		t.Fatalf("another resource: %v", err)
	}
	if err := p.take("m1\x00db.cert", time.Hour, start.Add(20*time.Minute)); err != nil {
		t.Fatalf("a third of its lifetime on: %v", err)
	}
}
