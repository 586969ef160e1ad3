package store

import (
	"context"
	"fmt"
	"time"

	"mesh/models"
)

// enrolmentRevocation lasts as long as the host token it refuses: host
// tokens do not expire, so neither does this.
const enrolmentRevocation = 100 * 365 * 24 * time.Hour

// revokeEnrolment refuses machine m's enrolment (its host token and every
// certificate issued to it) on every instance, through the one revocation
// mechanism.
func revokeEnrolment(tx *Tx, actor string, m *models.Machine, reason string) error {
	if m.TokenID == "" {
		return nil
	}
	_, err := revoke(tx, actor, &models.Revocation{TokenID: m.TokenID, Kind: models.RevokedMachine,
		Reason: reason, ExpiresAt: tx.s.Now().Add(enrolmentRevocation)})
	return err
}

// RecordCertificate records the client certificate issued to a machine
// (serial, expiry) and audits the issue; certOnly (a certificate issued at
// enrolment) refuses the enrolment's bearer token alone from then on. The machine must still be the
// enrolment the certificate names and not be revoked, checked in the same
// transaction: a certificate is never recorded for a machine deleted or
// revoked meanwhile.
func (s *Store) RecordCertificate(ctx context.Context, actor, name, enrolment, serial string, notAfter time.Time, detail string, certOnly bool) error {
	return s.write(ctx, func(tx *Tx) error {
		m, err := lockMachine(tx, name)
		if err != nil {
			return err
		}
		if m.TokenID != enrolment {
			return fmt.Errorf("%w: machine %s was enrolled again since this certificate's enrolment", models.ErrUnauthorized, name)
		}
		if m.RevokedAt != nil {
			return fmt.Errorf("%w: machine %s is revoked (%s)", models.ErrUnauthorized, name, m.RevokedReason)
		}
		if err := tx.Model(m).Updates(map[string]any{"cert_serial": serial, "cert_not_after": notAfter.UTC()}).Error; err != nil {
			return err
		}
		if certOnly {
			// Enrolled with a certificate, the machine is its certificate:
			// its bearer token alone (a copied host.json) is refused, on
			// every instance. (A host that asked for its first certificate
			// with its token keeps the token until --host-bearer-until: a
			// rollback to a release without certificates must reach the
			// controller.)
			if _, err := revoke(tx, actor, &models.Revocation{TokenID: models.BearerRevocationID(enrolment), Kind: models.RevokedBearer,
				Reason: "enrolled with a certificate", ExpiresAt: tx.s.Now().Add(enrolmentRevocation)}); err != nil {
				return err
			}
		}
		return audit(tx, actor, "issue-certificate", "machine/"+name,
			fmt.Sprintf("serial %s, valid until %s; %s", serial, notAfter.UTC().Format(time.RFC3339), detail))
	})
}

// RevokeMachine revokes a machine's identity: its state becomes revoked
// with the reason, and its token and every certificate issued to it are
// refused on every instance at once. Revoking a revoked machine changes
// nothing and is no error.
func (s *Store) RevokeMachine(ctx context.Context, actor, name, reason string) (*models.Machine, error) {
	return Write(ctx, s, func(tx *Tx) (*models.Machine, error) {
		m, err := lockMachine(tx, name)
		if err != nil {
			return nil, err
		}
		if m.RevokedAt != nil {
			return m, nil
		}
		now := s.Now()
		if err := tx.Model(m).Updates(map[string]any{"revoked_at": now, "revoked_reason": reason}).Error; err != nil {
			return nil, err
		}
		m.RevokedAt, m.RevokedReason = &now, reason
		if err := revokeEnrolment(tx, actor, m, reason); err != nil {
			return nil, err
		}
		return m, audit(tx, actor, "revoke-machine", "machine/"+name, reason)
	})
}

// SpendGraceRenewal revokes an expired certificate as it is renewed in
// its grace, so it renews once: spent is false when it was spent already.
func (s *Store) SpendGraceRenewal(ctx context.Context, name, serial string, until time.Time) (spent bool, err error) {
	return Write(ctx, s, func(tx *Tx) (bool, error) {
		r := &models.Revocation{TokenID: models.CertRevocationID(serial), Kind: models.RevokedCertificate,
			Reason: "expired; renewed once in its grace", ExpiresAt: until}
		spent, err := revoke(tx, "host:"+name, r)
		if err != nil || !spent {
			return spent, err
		}
		return true, audit(tx, "host:"+name, "revoke", r.Kind+"/"+serial[:min(8, len(serial))], r.Reason)
	})
}
