package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"mesh/models"
)

// CertificateGrant is what decides which names a machine's certificate
// request may have: the declaration its send carried, the send's
// generation and the generation the machine last applied.
type CertificateGrant struct {
	Declaration *models.DeclarationPayload
	SendGen     int64
	AppliedGen  int64
}

// CertificateGrantOf reads, in one snapshot, the declaration that send
// carried to machine. A send of another machine is forbidden and an unknown
// one invalid: a host reads only its own declarations.
func (s *Store) CertificateGrantOf(ctx context.Context, machineID int64, sendID string) (*CertificateGrant, error) {
	var g CertificateGrant
	err := s.snapshot(ctx, func(tx *Tx) error {
		var snd models.Send
		if err := tx.Where("id = ?", sendID).First(&snd).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return models.Invalid("send", "no send "+sendID)
			}
			return err
		}
		if snd.MachineID != machineID {
			return fmt.Errorf("%w: send %s was not to this machine", models.ErrForbidden, sendID)
		}
		var m models.Machine
		if err := tx.Select("id", "applied_generation").Where("id = ?", machineID).First(&m).Error; err != nil {
			return err
		}
		var d models.Declaration
		if err := tx.Select("envelope", "batch").Where("machine_id = ? AND generation = ?", machineID, snd.Generation).First(&d).Error; err != nil {
			return err
		}
		var p models.DeclarationPayload
		payload, err := models.PayloadOf(d.Sealed())
		if err != nil {
			return err
		}
		if err := json.Unmarshal(payload, &p); err != nil {
			return err
		}
		g = CertificateGrant{Declaration: &p, SendGen: snd.Generation, AppliedGen: m.AppliedGeneration}
		return nil
	})
	if err != nil {
		return nil, mapErr(err)
	}
	return &g, nil
}
