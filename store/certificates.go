package store

import (
	"cmp"
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
func (s *Store) RecordCertificate(ctx context.Context, actor, name, enrolment, serial string, notBefore, notAfter time.Time, detail string, certOnly bool) error {
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
		if err := tx.Model(m).Updates(map[string]any{"cert_serial": serial, "cert_not_before": notBefore.UTC(), "cert_not_after": notAfter.UTC()}).Error; err != nil {
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

// CertInUse records that machine name's host (of enrolment) presented its
// client certificate serial, and returns the serial in use after it ("":
// not this enrolment's, nothing recorded). The first time the machine's
// latest certificate is presented it becomes the one in use, and the one
// used before is retired — refused on every instance until until, through
// the one revocation mechanism, audited. So a renewal retires the old
// certificate once the new one is known to have reached the host, never at
// its issue, when a lost answer would leave the host only a refused one:
// the one in use stands until then (the host renews again with it).
//
// Any other certificate of the enrolment — neither the one in use nor the
// latest — is retired at once and refused (retired true, the refusal
// committed): it can only be one a renewal replaced or a copy's, and
// refused in memory from then on, it costs the store nothing again. A
// machine with none recorded in use (certified before this record was
// kept) takes the first it sees as the one in use. One that begins after
// the latest on record (notBefore) was issued after it, by a timeline the
// store lost (restored from a backup taken before its host renewed): no
// copy of an older one begins after the latest, so it is taken as the
// latest and in use, the one in use retired, as a renewal's is. Refused,
// the host was locked out for good: its older certificate retired, its
// token alone refused, its renewals refused by the same rule. (Its end
// says nothing of when it was issued: a copy of a certificate issued
// under a longer lifetime ended after its successor.)
func (s *Store) CertInUse(ctx context.Context, name, enrolment, serial string, notBefore, notAfter, until time.Time) (inUse string, retired bool, err error) {
	err = s.write(ctx, func(tx *Tx) error {
		m, err := lockMachine(tx, name)
		if err != nil {
			return err
		}
		switch {
		case m.TokenID != enrolment || serial == "":
			return nil // not this enrolment's: its other checks say so
		case serial == m.CertInUse:
			inUse = serial
			return nil
		case serial == m.CertSerial || m.CertInUse == "" || m.CertNotBefore != nil && notBefore.Truncate(time.Second).After(m.CertNotBefore.Truncate(time.Second)):
			prev := m.CertInUse // before the update, which sets m's field too
			detail := fmt.Sprintf("serial %s presented for the first time", serial)
			if serial != m.CertSerial && m.CertInUse != "" {
				// Newer than the latest on record: the latest now.
				if err := tx.Model(m).Updates(map[string]any{"cert_serial": serial, "cert_not_before": notBefore.UTC(), "cert_not_after": notAfter.UTC()}).Error; err != nil {
					return err
				}
				detail += ", issued after the latest on record (" + m.CertSerial + "): a store restored from before its host renewed"
			}
			if err := tx.Model(m).Update("cert_in_use", serial).Error; err != nil {
				return err
			}
			inUse = serial
			if prev != "" {
				r := &models.Revocation{TokenID: models.CertRetiredID(prev), Kind: models.RevokedCertificate,
					Reason: "replaced by " + serial, ExpiresAt: until}
				if _, err := revoke(tx, "host:"+name, r); err != nil {
					return err
				}
				detail += "; serial " + prev + ", used before it, retired"
			}
			return audit(tx, "host:"+name, "certificate-in-use", "machine/"+name, detail)
		default:
			retired = true
			r := &models.Revocation{TokenID: models.CertRetiredID(serial), Kind: models.RevokedCertificate,
				Reason: "neither in use (" + m.CertInUse + ") nor the latest (" + m.CertSerial + ")", ExpiresAt: until}
			if _, err := revoke(tx, "host:"+name, r); err != nil {
				return err
			}
			return audit(tx, "host:"+name, "revoke", r.Kind+"/"+serial[:min(8, len(serial))], "presented by machine "+name+"'s host: "+r.Reason)
		}
	})
	return inUse, retired, err
}

// RevokeMachine revokes a machine's identity: its state becomes revoked
// with the reason, and its token and every certificate issued to it are
// refused on every instance at once. Revoking a revoked machine changes
// nothing: again with its reason (a retry) is no error, with another it
// is a conflict saying so.
func (s *Store) RevokeMachine(ctx context.Context, actor, name, reason string) (*models.Machine, error) {
	return Write(ctx, s, func(tx *Tx) (*models.Machine, error) {
		m, err := lockMachine(tx, name)
		if err != nil {
			return nil, err
		}
		if m.RevokedAt != nil {
			if reason != "" && reason != m.RevokedReason {
				// Said, not done silently: a second revocation's reason
				// read as taken, and nothing recorded it.
				return nil, fmt.Errorf("%w: machine %s was revoked already, %s (%s); its reason is kept",
					models.ErrConflict, name, m.RevokedAt.UTC().Format(time.RFC3339), cmp.Or(m.RevokedReason, "no reason given"))
			}
			return m, nil // the same revocation again: a retry
		}
		now := s.Now()
		if err := tx.Model(m).Updates(map[string]any{"revoked_at": now, "revoked_reason": reason, "revoked_by": actor}).Error; err != nil {
			return nil, err
		}
		m.RevokedAt, m.RevokedReason, m.RevokedBy = &now, reason, actor
		if err := revokeEnrolment(tx, actor, m, reason); err != nil {
			return nil, err
		}
		return m, audit(tx, actor, "revoke-machine", "machine/"+name, reason)
	})
}
