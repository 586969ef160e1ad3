package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"mesh/models"

	"gorm.io/gorm"
)

// InsertReport stores a host's report as a row of its own and updates the
// machine's summary (what it last finished, applied and runs). The
// upgraded report of a trial the controller failed is refused
// (models.TrialFailedError): nothing of it is stored but the refusal's
// audit event, and the trial's failure when this report is what showed it.
//
// Every host reports after every change it applies, so a fleet's reports
// cost more than the fan-out that caused them; on PostgreSQL each
// statement is a round trip, so the common report is two statements
// between begin and commit: one reading the machine with its send, one
// storing the row with the machine's summary.
func (s *Store) InsertReport(ctx context.Context, machineID int64, r *models.Report, body []byte) (*models.ReportRow, error) {
	var row models.ReportRow
	var refusal error
	err := s.writeGrouped(ctx, func(tx *Tx) error {
		refusal = nil
		subj, err := readReportSubject(tx, machineID, r.Send)
		if err != nil {
			return err
		}
		m := &subj.Machine
		tied := false
		if r.Send != "" {
			if !subj.SendMachineID.Valid {
				return models.Invalid("send", "no send "+r.Send)
			}
			snd := models.Send{ID: r.Send, MachineID: subj.SendMachineID.Int64, Generation: subj.SendGeneration.Int64}
			if err := models.CheckReportSend(machineID, r, &snd); err != nil {
				return err
			}
			tied = true
		}
		if r.Outcome == models.OutcomeUpgraded {
			ref, err := judgeUpgraded(tx, m, r)
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
		up := models.ReportUpdates(m, r, tied, now)
		up["last_report_at"] = now
		if err := insertReportRow(tx, &row, up); err != nil {
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
		if r.Outcome == models.OutcomeUpgraded || r.Outcome == models.OutcomeRolledBack {
			return upgradeReported(tx, m, r)
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

// reportSubject is a report's machine and what a report checks of the send
// it names (null when there is no such send).
type reportSubject struct {
	models.Machine
	SendMachineID  sql.NullInt64 `gorm:"column:send_machine_id"`
	SendGeneration sql.NullInt64 `gorm:"column:send_generation"`
}

// readReportSubject reads the machine and the send a report names in one
// statement (send "" names none: no send has an empty id).
func readReportSubject(tx *Tx, machineID int64, send string) (*reportSubject, error) {
	var subj reportSubject
	res := tx.Raw(`SELECT machines.*, sends.machine_id AS send_machine_id, sends.generation AS send_generation
		FROM machines LEFT JOIN sends ON sends.id = ? WHERE machines.id = ?`, send, machineID).Scan(&subj)
	if res.Error != nil {
		return nil, res.Error
	}
	if res.RowsAffected == 0 {
		return nil, gorm.ErrRecordNotFound
	}
	return &subj, nil
}

// insertReportRow stores row and sets up (column → value) on its machine,
// giving row its id. On PostgreSQL it is one statement (a data-modifying
// WITH); SQLite, in the controller's own process, has no round trip to
// save and no such WITH.
func insertReportRow(tx *Tx, row *models.ReportRow, up map[string]any) error {
	if tx.s.dialect != Postgres {
		if err := tx.Create(row).Error; err != nil {
			return err
		}
		return tx.Model(&models.Machine{ID: row.MachineID}).Updates(up).Error
	}
	args := []any{row.SendID, row.MachineID, row.Generation, row.Digest, row.Outcome, row.Reason, row.Attempt,
		row.HostVersion, row.StartedAt, row.FinishedAt, row.Body, row.CreatedAt}
	cols := make([]string, 0, len(up))
	for c := range up {
		cols = append(cols, c)
	}
	// The columns are the store's own names (models.ReportUpdates), never
	// a host's; sorted, the statement's text is the same for the same set.
	slices.Sort(cols)
	var set strings.Builder
	for i, c := range cols {
		if i > 0 {
			set.WriteString(", ")
		}
		set.WriteString(c + " = ?")
		args = append(args, up[c])
	}
	args = append(args, row.MachineID)
	return tx.Raw(`WITH r AS (INSERT INTO reports (send_id, machine_id, generation, digest, outcome, reason, attempt,
			host_version, started_at, finished_at, body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id),
		m AS (UPDATE machines SET `+set.String()+` WHERE id = ?)
		SELECT id FROM r`, args...).Row().Scan(&row.ID)
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
