package store

import (
	"context"
	"errors"
	"fmt"

	"mesh/models"

	"gorm.io/gorm"
)

// InsertReport stores a host's report as a row of its own and updates the
// machine's summary (what it last finished, applied and runs). The
// upgraded report of a trial the controller failed is refused
// (models.TrialFailedError): nothing of it is stored but the refusal's
// audit event, and the trial's failure when this report is what showed it.
func (s *Store) InsertReport(ctx context.Context, machineID int64, r *models.Report, body []byte) (*models.ReportRow, error) {
	var row models.ReportRow
	var refusal error
	err := s.writeGrouped(ctx, func(tx *Tx) error {
		refusal = nil
		var m models.Machine
		if err := tx.Where("id = ?", machineID).First(&m).Error; err != nil {
			return err
		}
		tied := false
		if r.Send != "" {
			var snd models.Send
			if err := tx.Where("id = ?", r.Send).First(&snd).Error; err != nil {
				if errors.Is(err, gorm.ErrRecordNotFound) {
					return models.Invalid("send", "no send "+r.Send)
				}
				return err
			}
			if err := models.CheckReportSend(machineID, r, &snd); err != nil {
				return err
			}
			tied = true
		}
		if r.Outcome == models.OutcomeUpgraded {
			ref, err := judgeUpgraded(tx, &m, r)
			if err != nil {
				return err
			}
			if ref != nil {
				refusal = ref
				return audit(tx, "host:"+m.Name, "report-refused", "machine/"+m.Name, ref.Error())
			}
		}
		now := s.Now()
		row = models.ReportRow{SendID: r.Send, MachineID: machineID, Generation: r.Generation, Digest: r.Digest,
			Outcome: r.Outcome, Reason: r.Reason, Attempt: r.Attempt, HostVersion: r.HostVersion,
			StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, Body: string(body), CreatedAt: now}
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		if tied {
			// Lines only from a report on record for this machine, as
			// everything else a report moves.
			if err := keepServiceLogs(tx, machineID, &row, r.Logs); err != nil {
				return err
			}
		} else {
			// On the record: a report no send backs moves nothing.
			if err := audit(tx, "host:"+m.Name, "report-without-send", "machine/"+m.Name,
				fmt.Sprintf("%s for generation %d: kept, moves no generation", r.Outcome, r.Generation)); err != nil {
				return err
			}
		}
		up := models.ReportUpdates(&m, r, tied, now)
		up["last_report_at"] = now
		if err := tx.Model(&m).Updates(up).Error; err != nil {
			return err
		}
		if r.Outcome == models.OutcomeUpgraded || r.Outcome == models.OutcomeRolledBack {
			return upgradeReported(tx, &m, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if refusal != nil {
		return nil, refusal
	}
	return &row, nil
}

// Reports lists a machine's reports newest first.
func (s *Store) Reports(ctx context.Context, machineID int64, limit int, cursor int64) ([]models.ReportRow, error) {
	var rs []models.ReportRow
	q := s.db.WithContext(ctx).Where("machine_id = ?", machineID).Order("id DESC").Limit(limit)
	if cursor > 0 {
		q = q.Where("id < ?", cursor)
	}
	return rs, mapErr(q.Find(&rs).Error)
}
