package auth

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/crypto/bcrypt"
)

func TestHashPassword_CountsCharacters(t *testing.T) {
	for _, tc := range []struct {
		name, pw string
		ok       bool
	}{
		{"SixAccentsAreSixCharacters", "éééééé", false}, // 12 bytes, 6 characters
		{"DecomposedAccentsNormalised", "e\u0301e\u0301e\u0301e\u0301e\u0301e\u0301", false},
		{"TwelveCharacters", "twelve-chars", true},
		{"TwelveAccents", "éééééééééééé", true},
		{"OverBcryptLimit", string(make([]byte, 73)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := HashPassword(tc.pw); (err == nil) != tc.ok {
				t.Fatalf("HashPassword(%q): %v", tc.pw, err)
			}
		})
	}
	t.Run("EitherNormalFormMatches", func(t *testing.T) {
		h, err := HashPassword("café-café-café")
		if err != nil {
			t.Fatal(err)
		}
		if !CheckPassword(h, "cafe\u0301-cafe\u0301-cafe\u0301") {
			t.Fatal("the same password typed decomposed does not match")
		}
	})
}

// TestCheckNoUser_CostsWhatAPasswordDoes: an unknown user is checked
// against a dummy hash of the same cost as a real one, so it cannot be
// told from a known one by time (the figures are in the benchmark).
func TestCheckNoUser_CostsWhatAPasswordDoes(t *testing.T) {
	if CheckNoUser("anything") {
		t.Fatal("no user matched")
	}
	if c, err := bcrypt.Cost(dummyHash()); err != nil || c != bcrypt.DefaultCost {
		t.Fatalf("dummy hash cost %d (%v), want %d", c, err, bcrypt.DefaultCost)
	}
}

func BenchmarkLogin_UnknownVsKnownUser(b *testing.B) {
	h, _ := HashPassword("the-right-password")
	b.Run("Known", func(b *testing.B) {
		for range b.N {
			CheckPassword(h, "a-wrong-password")
		}
	})
	b.Run("Unknown", func(b *testing.B) {
		for range b.N {
			CheckNoUser("a-wrong-password")
		}
	})
}

func TestThrottle(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	th := NewThrottle()
	th.Now = func() time.Time { return now }
	t.Run("FreeFailuresThenWaits", func(t *testing.T) {
		for range 3 {
			if w := th.Wait("admin", "1.2.3.4"); w != 0 {
				t.Fatalf("waits %v before any failure limit", w)
			}
			th.Failed("admin", "1.2.3.4")
		}
		th.Failed("admin", "1.2.3.4")
		if w := th.Wait("admin", "1.2.3.4"); w != time.Second {
			t.Fatalf("after 4 failures: wait %v, want 1s", w)
		}
	})
	t.Run("WaitIsCapped", func(t *testing.T) {
		for range 100 {
			th.Failed("admin", "1.2.3.4")
		}
		if w := th.Wait("admin", "1.2.3.4"); w > 30*time.Second {
			t.Fatalf("wait %v: an attacker could lock the admin out", w)
		}
	})
	t.Run("OtherAddressUnaffected", func(t *testing.T) {
		if w := th.Wait("admin", "5.6.7.8"); w != 0 {
			t.Fatalf("the admin from elsewhere waits %v", w)
		}
	})
	t.Run("AddressLimitedAcrossUsers", func(t *testing.T) {
		for i := range 25 {
			th.Failed(string(rune('a'+i)), "9.9.9.9")
		}
		if w := th.Wait("someone-new", "9.9.9.9"); w == 0 {
			t.Fatal("an address spraying user names is not slowed")
		}
	})
	t.Run("SuccessForgets", func(t *testing.T) {
		th.Succeeded("admin", "1.2.3.4")
		now = now.Add(time.Minute)
		if w := th.Wait("admin", "1.2.3.4"); w != 0 {
			t.Fatalf("after a success: wait %v", w)
		}
	})
}

// TestParsePerson_RefusesATokenWithoutIssueTime: a signed person token
// without iat could not be judged against its user's revocations (a
// disable would not reach it), so it is refused.
func TestParsePerson_RefusesATokenWithoutIssueTime(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(nil)
	a := &Authority{KeyID: "k", Priv: priv, Now: time.Now, Revoked: NewRevocations()}
	now := time.Now()
	for _, iat := range []*jwt.NumericDate{jwt.NewNumericDate(now), nil} {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, PersonClaims{Role: "operator", RegisteredClaims: jwt.RegisteredClaims{
			Issuer: Issuer, Subject: "alice", Audience: jwt.ClaimStrings{AudienceOperator},
			IssuedAt: iat, ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)), ID: "t"}}).SignedString(priv)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.ParsePerson(tok)
		if iat != nil && err != nil {
			t.Fatalf("a token with iat: %v", err)
		}
		if iat == nil && err == nil {
			t.Fatal("a token without iat is accepted")
		}
	}
}

// TestThrottle_AttemptsCountBeforeTheirCheck: guesses sent at once are
// counted as they begin, not when their password check ends: of ten
// concurrent attempts the free ones and one more get through (all ten
// did, when a failure was counted only after its check). A success takes
// its attempt back, the address's token included.
func TestThrottle_AttemptsCountBeforeTheirCheck(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	th := NewThrottle()
	th.Now = func() time.Time { return now }
	through := 0
	for range 10 {
		if w, _ := th.Attempt("vic", "1.2.3.4"); w == 0 {
			through++
		}
	}
	if through != 4 {
		t.Fatalf("%d of 10 concurrent attempts checked, want 4", through)
	}
	for i := range 30 {
		w, done := th.Attempt("carol", "5.6.7.8")
		if w != 0 {
			t.Fatalf("success %d from one address waits %v", i, w)
		}
		now = now.Add(100 * time.Millisecond) // the password check's time
		done(true)
	}
	// Ended, the held guesses count as the failures they were.
	th2 := NewThrottle()
	th2.Now = func() time.Time { return now }
	var dones []func(bool)
	for range 4 {
		_, done := th2.Attempt("vic", "1.2.3.4")
		dones = append(dones, done)
	}
	for _, done := range dones {
		done(false)
	}
	if w := th2.Wait("vic", "1.2.3.4"); w != time.Second {
		t.Fatalf("after 4 failed at once: wait %v, want 1s", w)
	}
}

// TestCheckNoUser_CostsWhatAWrongPasswordDoesInAnyForm: a wrong password
// not in NFC (a decomposed "é") cost a known user two bcrypt comparisons
// and an unknown one a single one, so a failed login's time told which
// user names exist (~150 against ~75 ms). Each is timed at its fastest
// of five, interleaved: the same number of comparisons takes about the
// same time, twice as many about twice as long.
func TestCheckNoUser_CostsWhatAWrongPasswordDoesInAnyForm(t *testing.T) {
	h, err := HashPassword("the-right-password-café")
	if err != nil {
		t.Fatal(err)
	}
	const wrong = "a-wrong-password-cafe\u0301" // not NFC
	known, unknown := time.Hour, time.Hour
	for range 5 {
		start := time.Now()
		if CheckPassword(h, wrong) {
			t.Fatal("a wrong password matched")
		}
		known = min(known, time.Since(start))
		start = time.Now()
		CheckNoUser(wrong)
		unknown = min(unknown, time.Since(start))
	}
	if float64(known) > 1.5*float64(unknown) || float64(unknown) > 1.5*float64(known) {
		t.Fatalf("a wrong password not in NFC: %v for a known user, %v for an unknown one", known, unknown)
	}
}
