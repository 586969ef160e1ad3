package store

import (
	"context"
	"encoding/json"
	"fmt"

	"mesh/models"
)

// InsertReport stores a host's report as a row of its own and updates the
// machine's summary (what it last finished, applied and runs).
func (s *Store) InsertReport(ctx context.Context, machineID int64, r *models.Report, body []byte) (*models.ReportRow, error) {
	var row models.ReportRow
	err := s.write(ctx, func(tx *Tx) error {
		var m models.Machine
		if err := tx.Where("id = ?", machineID).First(&m).Error; err != nil {
			return err
		}
		if r.Send != "" {
			var snd models.Send
			if err := tx.Where("id = ?", r.Send).First(&snd).Error; err != nil {
				return models.Invalid("send", "no send "+r.Send)
			}
			if snd.MachineID != machineID {
				return fmt.Errorf("%w: send %s was not to this machine", models.ErrForbidden, r.Send)
			}
			if snd.Generation != r.Generation {
				return models.Invalid("generation", fmt.Sprintf("send %s carried generation %d, not %d", r.Send, snd.Generation, r.Generation))
			}
		}
		now := s.Now()
		row = models.ReportRow{SendID: r.Send, MachineID: machineID, Generation: r.Generation, Digest: r.Digest,
			Outcome: r.Outcome, Reason: r.Reason, Attempt: r.Attempt, HostVersion: r.HostVersion,
			StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, Body: string(body), CreatedAt: now}
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		up := map[string]any{"last_report_at": now}
		// The summary speaks of the latest generation only: a refusal of a
		// stale replay is kept as a report row, but the machine is still
		// what its latest generation made it.
		if r.Generation >= m.FinishedGen && r.Generation > 0 {
			up["last_outcome"], up["last_reason"] = r.Outcome, r.Reason
		}
		if r.HostVersion != "" {
			up["host_version"] = r.HostVersion
		}
		if models.FinalOutcome(r.Outcome) && r.Generation >= m.FinishedGen {
			up["finished_generation"] = r.Generation
		}
		if r.Outcome == models.OutcomeApplied && r.Generation >= m.AppliedGeneration {
			healthy := true
			for _, c := range r.Checks {
				healthy = healthy && c.OK
			}
			up["last_checks_ok"] = healthy
			up["applied_generation"] = r.Generation
			if r.Running != nil {
				b, _ := json.Marshal(r.Running)
				up["running"] = string(b)
			}
		}
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
