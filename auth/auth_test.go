package auth

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/crypto/bcrypt"

	"mesh/models"
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

// TestRevokedUser_ToTheMillisecond: a user's revocation refuses the tokens
// issued up to its millisecond, not one issued the same second after it
// (a login right after a user is enabled again, or given a new password,
// was refused until the next second). A token of an earlier release,
// whose issue time is whole seconds, is judged by that second.
func TestRevokedUser_ToTheMillisecond(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(nil)
	sec := time.Unix(1_800_000_000, 0)
	now := sec
	a := &Authority{KeyID: "k", Priv: priv, Now: func() time.Time { return now }, Revoked: NewRevocations()}
	a.Revoked.Now = a.Now
	issue := func(at time.Time) string {
		now = at
		tok, _, err := a.IssuePerson("alice", models.RoleOperator)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	before := issue(sec.Add(300 * time.Millisecond))
	after := issue(sec.Add(700 * time.Millisecond))
	// An earlier release's token: iat alone, in whole seconds.
	now = sec.Add(100 * time.Millisecond)
	old := jwt.NewWithClaims(jwt.SigningMethodEdDSA, PersonClaims{Role: models.RoleOperator, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: Issuer, Subject: "alice", Audience: jwt.ClaimStrings{AudienceOperator},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)), ID: "old"}})
	oldTok, err := old.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	revokedAt := sec.Add(500 * time.Millisecond)
	a.Revoked.Add([]models.Revocation{{TokenID: models.UserRevocationID("alice", revokedAt), Kind: models.RevokedUser, ExpiresAt: sec.Add(time.Hour)}})
	now = sec.Add(800 * time.Millisecond)
	if _, err := a.ParsePerson(before); err == nil {
		t.Error("a token issued before the revocation, the same second, is accepted")
	}
	if _, err := a.ParsePerson(oldTok); err == nil {
		t.Error("an earlier release's token of the revocation's second is accepted")
	}
	if _, err := a.ParsePerson(after); err != nil {
		t.Errorf("a token issued after the revocation, the same second, is refused: %v", err)
	}
}
