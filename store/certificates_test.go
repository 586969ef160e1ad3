package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

func enrolAs(t *testing.T, s *store.Store, name, enrolment string) *models.Machine {
	t.Helper()
	ctx := context.Background()
	if err := s.CreateJoinToken(ctx, "test", "hash-"+name, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	m, err := s.Enroll(ctx, "hash-"+name, name, "linux", "amd64", "1.0.0", "1", enrolment)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func revokedIDs(t *testing.T, s *store.Store) map[string]string {
	t.Helper()
	rs, err := s.Revocations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rs {
		out[r.TokenID] = r.Kind
	}
	return out
}

// TestMachineCertificates: a certificate is recorded on its machine (one
// issued at enrolment refuses its bearer token alone from then on); revoking the machine marks it and revokes its enrolment (announced to
// every instance), and no certificate is recorded for it after; deleting
// a machine revokes its enrolment too.
func TestMachineCertificates(t *testing.T) {
	ctx := context.Background()
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		var heard []models.Revocation
		s.OnRevoked(func(rs []models.Revocation) { heard = append(heard, rs...) })
		enrolAs(t, s, "m1", "enrol-m1")
		enrolAs(t, s, "m2", "enrol-m2")
		until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		begun := time.Now().Add(-time.Minute)
		if err := s.RecordCertificate(ctx, "host:m1", "m1", "enrol-m1", "abc", begun, until, "enrolment", true); err != nil {
			t.Fatal(err)
		}
		m, _ := s.Machine(ctx, "m1")
		if m.CertSerial != "abc" || m.CertNotAfter == nil || !m.CertNotAfter.Equal(until) {
			t.Fatalf("recorded %q %v", m.CertSerial, m.CertNotAfter)
		}
		// Enrolled with a certificate, m1's bearer token alone is refused,
		// on every instance.
		if got := revokedIDs(t, s); got["bearer:enrol-m1"] != models.RevokedBearer || got["bearer:enrol-m2"] != "" {
			t.Fatalf("revocations after m1's certificate: %v", got)
		}
		if len(heard) != 1 || heard[0].TokenID != "bearer:enrol-m1" {
			t.Fatalf("announced %+v", heard)
		}
		heard = nil
		t.Run("ErrEnrolledAgain", func(t *testing.T) {
			err := s.RecordCertificate(ctx, "host:m1", "m1", "enrol-old", "def", begun, until, "", false)
			if !errors.Is(err, models.ErrUnauthorized) {
				t.Fatalf("%v", err)
			}
		})

		m, err := s.RevokeMachine(ctx, "user:admin", "m1", "stolen laptop")
		if err != nil || m.RevokedAt == nil || m.RevokedReason != "stolen laptop" {
			t.Fatalf("revoke: %+v %v", m, err)
		}
		if got := revokedIDs(t, s); got["enrol-m1"] != models.RevokedMachine {
			t.Fatalf("revocations %v", got)
		}
		if len(heard) != 1 || heard[0].TokenID != "enrol-m1" {
			t.Fatalf("announced %+v", heard)
		}
		if _, err := s.RevokeMachine(ctx, "user:admin", "m1", "stolen laptop"); err != nil || len(heard) != 1 {
			t.Fatalf("revoking twice (a retry): %v, announced %d", err, len(heard))
		}
		// Again with another reason: said, not taken silently (it printed
		// "revoked" and kept the first reason without a word).
		if _, err := s.RevokeMachine(ctx, "user:admin", "m1", "again"); !errors.Is(err, models.ErrConflict) ||
			!strings.Contains(err.Error(), "machine m1 was revoked already") || !strings.Contains(err.Error(), "(stolen laptop); its reason is kept") || len(heard) != 1 {
			t.Fatalf("revoking twice with another reason: %v, announced %d", err, len(heard))
		}
		if err := s.RecordCertificate(ctx, "host:m1", "m1", "enrol-m1", "ghi", begun, until, "", false); !errors.Is(err, models.ErrUnauthorized) {
			t.Fatalf("a certificate recorded for a revoked machine: %v", err)
		}
		if m, _ := s.Machine(ctx, "m1"); models.DefaultStateRules.State(m, m.LastSeen, time.Now()) != models.StateRevoked {
			t.Fatal("not revoked")
		}

		if err := s.DeleteMachine(ctx, "user:admin", "m2"); err != nil {
			t.Fatal(err)
		}
		if got := revokedIDs(t, s); got["enrol-m2"] != models.RevokedMachine {
			t.Fatalf("deleting m2 left its enrolment unrevoked: %v", got)
		}

	})
}

// TestCertInUse_ANewCertificateRetiresTheOldOnceUsed: a renewal's new
// certificate retires the old one when its host first presents it — not
// at its issue, when a lost answer would leave the host only a refused
// certificate. Until then the old one stands (the host renews again with
// it); after, it is refused, on every instance (a revocation), and the
// record says so.
func TestCertInUse_ANewCertificateRetiresTheOldOnceUsed(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		enrolAs(t, s, "m1", "enrol-m1")
		until := time.Now().Add(time.Hour)
		begun := time.Now().Add(-time.Minute)
		issue := func(serial string) {
			t.Helper()
			if err := s.RecordCertificate(ctx, "host:m1", "m1", "enrol-m1", serial, begun, until, "", false); err != nil {
				t.Fatal(err)
			}
		}
		use := func(serial string) (string, error) {
			got, retired, err := s.CertInUse(ctx, "m1", "enrol-m1", serial, begun, until, until)
			if retired {
				err = errors.Join(err, models.ErrUnauthorized)
			}
			return got, err
		}

		issue("aa")
		if got, err := use("aa"); err != nil || got != "aa" {
			t.Fatalf("the first certificate presented: %q %v", got, err)
		}
		issue("bb") // renewed; the answer may be lost
		if got, err := use("aa"); err != nil || got != "aa" {
			t.Fatalf("the old certificate before the new one was presented: %q %v", got, err)
		}
		if _, ok := revokedIDs(t, s)[models.CertRetiredID("aa")]; ok {
			t.Fatalf("the old certificate was retired before the new one was presented: %v", revokedIDs(t, s))
		}
		if got, err := use("bb"); err != nil || got != "bb" {
			t.Fatalf("the new certificate presented: %q %v", got, err)
		}
		if revokedIDs(t, s)[models.CertRetiredID("aa")] != models.RevokedCertificate {
			t.Fatalf("the old certificate not retired once the new one was presented: %v", revokedIDs(t, s))
		}
		// Presented again, it is refused in memory (retired): no store.
		if _, ok := revokedIDs(t, s)[models.CertRetiredID("aa")]; !ok {
			t.Fatal("aa not retired")
		}
		// One neither in use nor the latest (a copy's, one a renewal
		// replaced) is retired at once, the refusal committed.
		issue("cc")
		if _, err := use("zz"); !errors.Is(err, models.ErrUnauthorized) || revokedIDs(t, s)[models.CertRetiredID("zz")] != models.RevokedCertificate {
			t.Fatalf("a certificate neither in use nor the latest: %v; %v", err, revokedIDs(t, s))
		}
		if got, err := use("bb"); err != nil || got != "bb" {
			t.Fatalf("the one in use, cc issued and not presented: %q %v", got, err)
		}
		if m, _ := s.Machine(ctx, "m1"); m.CertInUse != "bb" {
			t.Fatalf("in use: %q", m.CertInUse)
		}
		// Another enrolment's certificate is not this machine's to record.
		if got, retired, err := s.CertInUse(ctx, "m1", "enrol-other", "cc", begun, until, until); err != nil || got != "" || retired {
			t.Fatalf("another enrolment's: %q %v", got, err)
		}
	})
}

// TestCertInUse_ACertificateIssuedAfterTheLatestOnRecord: the store was
// restored from a backup taken before the host renewed; the host presents
// the certificate it renewed to, issued after the latest on record. It was
// retired as "neither in use nor the latest" and refused, and with it the
// host was locked out for good (its older certificate retired, its token
// alone refused, its renewals refused by the same rule). It is taken as
// the latest and in use; an older one still is not — nor a copy of an
// older one that ends later, issued under a longer lifetime before the
// operator shortened it.
func TestCertInUse_ACertificateIssuedAfterTheLatestOnRecord(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		enrolAs(t, s, "m1", "enrol-m1")
		now := time.Now().UTC().Truncate(time.Second)
		until := now.Add(60 * 24 * time.Hour)
		// s-old, issued under a 30-day lifetime; then the lifetime is
		// shortened to a day and s1 issued.
		oldEnd := now.Add(30 * 24 * time.Hour)
		if err := s.RecordCertificate(ctx, "host:m1", "m1", "enrol-m1", "s-old", now.Add(-2*time.Hour), oldEnd, "", false); err != nil {
			t.Fatal(err)
		}
		if got, retired, err := s.CertInUse(ctx, "m1", "enrol-m1", "s-old", now.Add(-2*time.Hour), oldEnd, until); err != nil || retired || got != "s-old" {
			t.Fatalf("s-old: %q %v %v", got, retired, err)
		}
		b1, e1 := now.Add(-time.Hour), now.Add(23*time.Hour)
		if err := s.RecordCertificate(ctx, "host:m1", "m1", "enrol-m1", "s1", b1, e1, "", false); err != nil {
			t.Fatal(err)
		}
		if got, retired, err := s.CertInUse(ctx, "m1", "enrol-m1", "s1", b1, e1, until); err != nil || retired || got != "s1" {
			t.Fatalf("s1: %q %v %v", got, retired, err)
		}
		// A copy of s-old (its retirement lapsed) ends after s1, and began
		// before it: refused.
		if got, retired, _ := s.CertInUse(ctx, "m1", "enrol-m1", "s-old", now.Add(-2*time.Hour), oldEnd, until); !retired || got != "" {
			t.Fatalf("a copy of the certificate s1 replaced, issued under a longer lifetime: in use %q, retired %v", got, retired)
		}
		// After the backup: s2 issued and presented, the store having lost
		// its record.
		b2, e2 := now, now.Add(24*time.Hour)
		got, retired, err := s.CertInUse(ctx, "m1", "enrol-m1", "s2", b2, e2, until)
		if err != nil || retired || got != "s2" {
			t.Fatalf("s2, issued after the latest on record (s1): %q retired %v %v", got, retired, err)
		}
		if m, _ := s.Machine(ctx, "m1"); m.CertSerial != "s2" || m.CertInUse != "s2" {
			t.Fatalf("the machine's certificate: latest %q, in use %q", m.CertSerial, m.CertInUse)
		}
	})
}
