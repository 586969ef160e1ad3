// Package auth is who may do what: the token authority (JWTs for people
// and hosts), password hashing and checking, and secret tokens. api, web
// and cmd use it; it knows nothing of HTTP.
package auth

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"mesh/models"
)

// JWT audiences: a host's token and a person's can never stand in for each
// other, because each parser accepts exactly one audience.
const (
	Issuer           = "mesh-controller"
	AudienceOperator = "mesh-operator"
	AudienceHost     = "mesh-host"
	// PersonTokenTTL is how long a login lasts.
	PersonTokenTTL = 12 * time.Hour
)

// Authority issues and checks JWTs with the controller's token key. The
// algorithm is pinned to EdDSA: a token that says HS256 (say, keyed with
// the public key) or none is refused before its signature is looked at.
type Authority struct {
	KeyID string
	Priv  ed25519.PrivateKey
	Now   func() time.Time
	// Revoked refuses tokens by id (a logged-out session); nil: none.
	Revoked *Revocations
	// Used remembers when API tokens were last used; nil: not kept.
	Used *LastUse

	// verified remembers host tokens whose signature checked out. A host
	// polls every minute with the same token; verifying it each time would
	// cost a signature check per poll. Host tokens do not expire; they are
	// revoked through the token id the hub checks on every request.
	mu       sync.Mutex
	verified map[string]*HostClaims
}

// maxVerified bounds the verified-token memory; past it, it starts over.
const maxVerified = 200_000

// PersonClaims are a person's token claims.
type PersonClaims struct {
	Role string `json:"role"`
	// Kind is KindAPIToken for an API token; empty for a login's session.
	Kind string `json:"kind,omitempty"`
	jwt.RegisteredClaims
}

// KindAPIToken marks an API token's claims.
const KindAPIToken = "api"

// HostClaims are a host's token claims: the machine is the subject, the
// token id lets an admin revoke it by re-enrolling.
type HostClaims struct {
	jwt.RegisteredClaims
}

// IssuePerson makes a person's token, issued at issued: the time the
// login began, before it read the user, so that a disable or a new
// password committed while the password was being checked refuses this
// token too (its revocation is at or after that time).
func (a *Authority) IssuePerson(user, role string, issued time.Time) (string, time.Time, error) {
	exp := issued.Add(PersonTokenTTL)
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, PersonClaims{Role: role, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: Issuer, Subject: user, Audience: jwt.ClaimStrings{AudienceOperator},
		IssuedAt: jwt.NewNumericDate(issued), ExpiresAt: jwt.NewNumericDate(exp), ID: NewSecret()[:22],
	}})
	t.Header["kid"] = a.KeyID
	s, err := t.SignedString(a.Priv)
	return s, exp, err
}

// IssueHost makes a host's token for a machine. It has no expiry: a host
// must keep working through any outage; it is revoked with its machine.
func (a *Authority) IssueHost(machine, tokenID string) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, HostClaims{RegisteredClaims: jwt.RegisteredClaims{
		Issuer: Issuer, Subject: machine, Audience: jwt.ClaimStrings{AudienceHost},
		IssuedAt: jwt.NewNumericDate(a.Now()), ID: tokenID,
	}})
	t.Header["kid"] = a.KeyID
	return t.SignedString(a.Priv)
}

func (a *Authority) keyFunc(t *jwt.Token) (any, error) {
	return a.Priv.Public(), nil
}

// ParsePerson checks a person's token.
func (a *Authority) ParsePerson(s string) (*PersonClaims, error) {
	var c PersonClaims
	_, err := jwt.ParseWithClaims(s, &c, a.keyFunc,
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithAudience(AudienceOperator), jwt.WithIssuer(Issuer),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(a.Now), jwt.WithLeeway(models.TokenLeeway))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", models.ErrUnauthorized, tokenWords(err, c.ExpiresAt))
	}
	if !models.ValidRole(c.Role) || c.Subject == "" {
		return nil, fmt.Errorf("%w: token has no valid role", models.ErrUnauthorized)
	}
	if a.Revoked.Revoked(c.ID) {
		if c.Kind == KindAPIToken {
			return nil, fmt.Errorf("%w: this API token was revoked", models.ErrUnauthorized)
		}
		return nil, fmt.Errorf("%w: this token was revoked (logged out); log in again", models.ErrUnauthorized)
	}
	// Every token this controller issues says when: one that does not
	// could not be judged against its user's revocations.
	if c.IssuedAt == nil {
		return nil, fmt.Errorf("%w: token has no issue time (iat)", models.ErrUnauthorized)
	}
	if a.Revoked.RevokedUser(c.Subject, c.IssuedAt.Time) {
		return nil, fmt.Errorf("%w: user %s was disabled, changed role or was given a new password since this token was issued", models.ErrUnauthorized, c.Subject)
	}
	if c.Kind == KindAPIToken {
		a.Used.Seen(c.ID, a.Now())
	}
	return &c, nil
}

// IssueAPIToken makes a long-lived token of a person or builder, with the
// id the store keeps it by. It is a JWT like a login's, so checking it
// costs no store read; revoking it is revoking its id.
func (a *Authority) IssueAPIToken(user, role, id string, expires time.Time) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, PersonClaims{Role: role, Kind: KindAPIToken, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: Issuer, Subject: user, Audience: jwt.ClaimStrings{AudienceOperator},
		IssuedAt: jwt.NewNumericDate(a.Now()), ExpiresAt: jwt.NewNumericDate(expires), ID: id,
	}})
	t.Header["kid"] = a.KeyID
	return t.SignedString(a.Priv)
}

// ParseHost checks a host's token.
func (a *Authority) ParseHost(s string) (*HostClaims, error) {
	a.mu.Lock()
	c, ok := a.verified[s]
	a.mu.Unlock()
	if ok {
		return c, nil
	}
	c, err := a.parseHost(s)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.verified == nil || len(a.verified) >= maxVerified {
		a.verified = map[string]*HostClaims{}
	}
	a.verified[s] = c
	a.mu.Unlock()
	return c, nil
}

func (a *Authority) parseHost(s string) (*HostClaims, error) {
	var c HostClaims
	_, err := jwt.ParseWithClaims(s, &c, a.keyFunc,
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithAudience(AudienceHost), jwt.WithIssuer(Issuer), jwt.WithTimeFunc(a.Now))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", models.ErrUnauthorized, err)
	}
	if c.Subject == "" || c.ID == "" {
		return nil, fmt.Errorf("%w: host token names no machine", models.ErrUnauthorized)
	}
	return &c, nil
}

// tokenWords says why a person's token was refused in a person's words,
// not the JWT library's ("token contains an invalid number of segments").
func tokenWords(err error, expires *jwt.NumericDate) string {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired) && expires != nil:
		return "the token expired at " + expires.UTC().Format(time.RFC3339)
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "this is not a token (malformed)"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return "the token was not signed by this controller's key (another controller's, or altered)"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "the token is not a person's (a host's token is not an operator's)"
	}
	return err.Error()
}
