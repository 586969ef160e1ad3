package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"mesh/models"
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
		if r.Outcome == models.OutcomeUpgraded || r.Outcome == models.OutcomeRolledBack {
			// Judging a host's upgrade reads more of its machine (its
			// platform's release, its schemas): the whole row, as the
			// rare report it is.
			if err := tx.Where("id = ?", machineID).First(m).Error; err != nil {
				return err
			}
		}
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

// reportSubject is a report's machine, with the columns every report
// reads (its id and name, and what models.ReportUpdates compares), and
// what a report checks of the send it names (null when there is no such
// send).
type reportSubject struct {
	models.Machine
	SendMachineID  sql.NullInt64
	SendGeneration sql.NullInt64
}

// readReportSubject reads the machine and the send a report names in one
// statement (send "" names none: no send has an empty id), scanned
// straight into the fields rather than by gorm's reflection over every
// column of both.
func readReportSubject(tx *Tx, machineID int64, send string) (*reportSubject, error) {
	var subj reportSubject
	m := &subj.Machine
	err := tx.scanRow(`SELECT machines.id, machines.name, machines.schema, machines.applied_generation,
			machines.finished_generation, machines.health, machines.health_check, machines.health_since,
			sends.machine_id, sends.generation
		FROM machines LEFT JOIN sends ON sends.id = ? WHERE machines.id = ?`, []any{send, machineID},
		&m.ID, &m.Name, &m.Schema, &m.AppliedGeneration, &m.FinishedGen, &m.Health, &m.HealthCheck,
		&m.HealthSince, &subj.SendMachineID, &subj.SendGeneration)
	if err != nil {
		return nil, err
	}
	return &subj, nil
}

// insertReportRow stores row and sets up (column → value) on its machine,
// giving row its id. On PostgreSQL it is one statement (a data-modifying
// WITH), one round trip; SQLite has no such WITH, and in the controller's
// own process no round trip to save.
func insertReportRow(tx *Tx, row *models.ReportRow, up map[string]any) error {
	args := []any{row.SendID, row.MachineID, row.Generation, row.Digest, row.Outcome, row.Reason, row.Attempt,
		row.HostVersion, row.StartedAt, row.FinishedAt, row.Body, row.CreatedAt}
	const insert = `INSERT INTO reports (send_id, machine_id, generation, digest, outcome, reason, attempt,
			host_version, started_at, finished_at, body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`
	cols := make([]string, 0, len(up))
	for c := range up {
		cols = append(cols, c)
	}
	// The columns are the store's own names (models.ReportUpdates), never
	// a host's; sorted, the statement's text is the same for the same set
	// (a statement kept by its text, on both engines).
	slices.Sort(cols)
	var set strings.Builder
	vals := make([]any, 0, len(cols)+1)
	for i, c := range cols {
		if i > 0 {
			set.WriteString(", ")
		}
		set.WriteString(c + " = ?")
		vals = append(vals, up[c])
	}
	vals = append(vals, row.MachineID)
	update := `UPDATE machines SET ` + set.String() + ` WHERE id = ?`
	if tx.s.dialect == Postgres {
		return tx.scanRow(`WITH r AS (`+insert+`), m AS (`+update+`) SELECT id FROM r`, append(args, vals...), &row.ID)
	}
	if err := tx.scanRow(insert, args, &row.ID); err != nil {
		return err
	}
	return tx.execDirect(update, vals...)
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
