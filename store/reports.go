package store

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

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
// statement is a round trip, so a report is two statements, one reading
// the machine with its send, one storing the row with the machine's
// summary, and the common report has no begin and commit around them
// (insertReportAtOnce).
func (s *Store) InsertReport(ctx context.Context, machineID int64, r *models.Report, body []byte) (*models.ReportRow, error) {
	// Its checks' times on this clock, whichever way it is stored.
	r.OnControllerClock(s.Now())
	if s.dialect == Postgres && atOnce(r) {
		if row, err, done := s.insertReportAtOnce(ctx, machineID, r, body); done {
			return row, err
		}
	}
	var row models.ReportRow
	var refusal error
	err := s.writeGrouped(ctx, func(tx *Tx) error {
		refusal = nil
		if upgrade(r) {
			if err := lockLiveRollouts(tx, machineID); err != nil {
				return err
			}
		}
		subj, err := readReportSubject(tx, machineID, r.Send)
		if err != nil {
			return err
		}
		if s.beforeReportWrite != nil {
			s.beforeReportWrite(false)
		}
		m := &subj.Machine
		if upgrade(r) {
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
			if r.Late, err = lateReport(tx, m, r); err != nil {
				return err
			}
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
		row = newReportRow(machineID, r, body, now)
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
		}
		// A report no send backs moves nothing; it is put on the record by
		// the API, at most a row a minute for a machine (a host within its
		// report limits wrote ~86,000 audit rows a day of them).
		if upgrade(r) {
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

// atOnce says whether r is the common report, the one stored without a
// transaction of its own on PostgreSQL (insertReportAtOnce): it names its
// send, carries no service output and is no host upgrade's.
func atOnce(r *models.Report) bool {
	return r.Send != "" && len(r.Logs) == 0 && !upgrade(r)
}

// upgrade says whether r is a host upgrade's report.
func upgrade(r *models.Report) bool {
	return r.Outcome == models.OutcomeUpgraded || r.Outcome == models.OutcomeRolledBack || models.RefusesRelease(r.Outcome, r.Reason)
}

// fields are where reportSubjectQuery's columns are scanned, in its order.
func (subj *reportSubject) fields() []any {
	m := &subj.Machine
	return []any{&m.ID, &m.Name, &m.Schema, &m.AppliedGeneration, &m.FinishedGen, &m.LastOutcomeSend, &m.Health, &m.HealthCheck,
		&m.HealthSince, &m.HealthAt, &m.HealthFailing, &subj.SendMachineID, &subj.SendGeneration}
}

// reportSubjectQuery reads a report's machine and its send (fields).
const reportSubjectQuery = `SELECT machines.id, machines.name, machines.schema, machines.applied_generation,
		machines.finished_generation, machines.last_outcome_send, machines.health, machines.health_check, machines.health_since,
		machines.health_at, machines.health_failing, sends.machine_id, sends.generation
	FROM machines LEFT JOIN sends ON sends.id = ? WHERE machines.id = ?`

// insertReportAtOnce stores the common report on PostgreSQL in two
// statements and no transaction of their own: the machine and its send
// read, then the row inserted and the machine's summary updated in one
// statement, which updates only if what the read saw of the machine is
// still so (and inserts only if it updated). Two round trips where a
// transaction takes four (begin, read, write, commit), for the report
// every host sends after every change. done is false when the report must
// go the transaction's way instead, nothing of it stored: its machine or
// its send is not there (the transaction's way says which), or the
// machine changed in between. Any other error is the report's answer,
// not a reason to run it again: its reply, when lost, may have followed
// its commit (run again, the report would be stored twice) — save a
// deadlock's victim, which was rolled back whole (making a partition
// locks the tables in an order of its own) and goes the transaction's way.
func (s *Store) insertReportAtOnce(ctx context.Context, machineID int64, r *models.Report, body []byte) (row *models.ReportRow, err error, done bool) {
	sqldb, err := s.db.DB()
	if err != nil {
		return nil, mapErr(err), true
	}
	var subj reportSubject
	m := &subj.Machine
	err = sqldb.QueryRowContext(ctx, s.directText(reportSubjectQuery), r.Send, machineID).Scan(subj.fields()...)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !subj.SendMachineID.Valid) {
		return nil, nil, false
	}
	if err != nil {
		return nil, mapErr(err), true
	}
	snd := models.Send{ID: r.Send, MachineID: subj.SendMachineID.Int64, Generation: subj.SendGeneration.Int64}
	if err := models.CheckReportSend(machineID, r, &snd); err != nil {
		return nil, err, true // refused, as the transaction's way refuses it: nothing stored
	}
	if mayBeLate(m, r) {
		return nil, nil, false // the rare report lateReport judges: the transaction's way
	}
	if s.beforeReportWrite != nil {
		s.beforeReportWrite(true)
	}
	now := s.Now()
	stored := newReportRow(machineID, r, body, now)
	up := models.ReportUpdates(m, r, true, now)
	up["last_report_at"] = now
	set, vals := setColumns(up)
	// The guard names every column ReportUpdates compared.
	vals = append(vals, machineID, m.Schema, m.AppliedGeneration, m.FinishedGen, m.Health, m.HealthCheck, m.HealthSince, m.HealthAt, m.HealthFailing)
	q := `WITH m AS (UPDATE machines SET ` + set + ` WHERE id = ? AND schema = ? AND applied_generation = ?
			AND finished_generation = ? AND health = ? AND health_check = ? AND health_since IS NOT DISTINCT FROM CAST(? AS timestamptz)
			AND health_at IS NOT DISTINCT FROM CAST(? AS timestamptz) AND health_failing = ?
			RETURNING id),
		r AS (INSERT INTO reports (` + reportColumns + `) SELECT ` + reportCasts + ` FROM m RETURNING id)
		SELECT id FROM r`
	err = sqldb.QueryRowContext(ctx, s.directText(q), append(vals, reportRowValues(&stored)...)...).Scan(&stored.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, false // the machine moved on (or is gone): nothing was stored
	}
	if retryable(err) {
		// A deadlock's victim (a table's lock taken otherwise, as making
		// a partition does) was rolled back whole: nothing was stored, so
		// the transaction's way may store it, retrying as writes do.
		return nil, nil, false
	}
	if err != nil {
		return nil, mapErr(err), true
	}
	s.ckpt.wroteNow()
	return &stored, nil, true
}

// mayBeLate says whether r is of the generation its machine finished:
// either the host was sent that generation again (its state lost) and
// says how that went, or r is a copy of a report before the machine's
// last word, committed after it (a retry after a timeout on a slow
// instance). lateReport tells them apart. A report of a generation not
// finished yet — nearly every report — is neither.
func mayBeLate(m *models.Machine, r *models.Report) bool {
	return r.Generation > 0 && r.Generation == m.FinishedGen &&
		(r.Outcome == models.OutcomeFailed || models.FinalOutcome(r.Outcome))
}

// lateReport says whether r (mayBeLate) is such a copy: its send was made
// before the send of the machine's last word, or it is a failed attempt
// of that same send (a send's final word comes after its failed
// attempts). Taken as the latest word, a failed attempt made a machine
// whose host had rejected the generation read current, and an applied
// one hid the failure of the generation sent again since.
func lateReport(tx *Tx, m *models.Machine, r *models.Report) (bool, error) {
	if !mayBeLate(m, r) {
		return false, nil
	}
	last := m.LastOutcomeSend
	if last == "" {
		// Not kept: the last word came before migration 0040, or was a
		// report naming no send (a rollback, a refused release). The
		// send of the latest report of the generation that names one.
		if err := tx.Raw(`SELECT send_id FROM reports WHERE machine_id = ? AND generation = ? AND send_id <> '' AND outcome IN ?
			ORDER BY created_at DESC, id DESC LIMIT 1`, m.ID, r.Generation,
			[]string{models.OutcomeApplied, models.OutcomeRefused, models.OutcomeRejected, models.OutcomeFailed}).Scan(&last).Error; err != nil {
			return false, err
		}
		if last == "" {
			return false, nil
		}
	}
	if r.Send == last {
		return !models.FinalOutcome(r.Outcome), nil
	}
	var late bool
	err := tx.Raw(`SELECT COALESCE((SELECT created_at FROM sends WHERE id = ?) < (SELECT created_at FROM sends WHERE id = ?), false)`,
		r.Send, last).Scan(&late).Error
	return late, err
}

// readReportSubject reads the machine and the send a report names in one
// statement (send "" names none: no send has an empty id), scanned
// straight into the fields rather than by gorm's reflection over every
// column of both.
//
// On PostgreSQL the machine's row is locked by the read for the rest of
// the transaction: two reports of one machine at once (one of them with
// service output, say) are then stored one after the other, the second
// reading what the first wrote, so neither moves the machine back. The
// report's own update took that lock a few statements later, with nothing
// locked in between, so the order of locks is unchanged. An upgrade's
// report locks the live rollouts its machine is in first
// (lockLiveRollouts), in a worker's order.
func readReportSubject(tx *Tx, machineID int64, send string) (*reportSubject, error) {
	var subj reportSubject
	q := reportSubjectQuery
	if tx.s.dialect == Postgres {
		q += ` FOR UPDATE OF machines`
	}
	if err := tx.scanRow(q, []any{send, machineID}, subj.fields()...); err != nil {
		return nil, err
	}
	return &subj, nil
}

// lockLiveRollouts locks, on PostgreSQL, the running or paused rollouts a
// machine is in, before its own row is locked: an upgrade's report judges
// its trial and steps its rollout from what it reads of them, and read
// without a lock another instance's step (which takes a rollout, then its
// machines) failed the trial meanwhile and the report was accepted all
// the same (its launcher then kept a release the controller had failed),
// or a person's cancel was written over by the report finishing the
// rollout (the cancelled release made the fleet default); and the
// machine's summary was written from a read that a newer report had
// moved past. The worker's step and a person's act take the same rows in
// the same order.
func lockLiveRollouts(tx *Tx, machineID int64) error {
	if tx.s.dialect != Postgres {
		return nil
	}
	var ids []int64
	return tx.Raw(`SELECT id FROM rollouts WHERE state IN (?, ?)
			AND id IN (SELECT rollout_id FROM rollout_machines WHERE machine_id = ?)
		ORDER BY id FOR UPDATE`, models.RolloutRunning, models.RolloutPaused, machineID).Scan(&ids).Error
}

// insertReportRow stores row and sets up (column → value) on its machine,
// giving row its id. On PostgreSQL it is one statement (a data-modifying
// WITH), one round trip; SQLite has no such WITH, and in the controller's
// own process no round trip to save.
func insertReportRow(tx *Tx, row *models.ReportRow, up map[string]any) error {
	args := reportRowValues(row)
	const insert = `INSERT INTO reports (` + reportColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`
	set, vals := setColumns(up)
	vals = append(vals, row.MachineID)
	update := `UPDATE machines SET ` + set + ` WHERE id = ?`
	if tx.s.dialect == Postgres {
		return tx.scanRow(`WITH r AS (`+insert+`), m AS (`+update+`) SELECT id FROM r`, append(args, vals...), &row.ID)
	}
	if err := tx.scanRow(insert, args, &row.ID); err != nil {
		return err
	}
	return tx.execDirect(update, vals...)
}

// newReportRow is the row a report is stored as, received at now.
func newReportRow(machineID int64, r *models.Report, body []byte, now time.Time) models.ReportRow {
	return models.ReportRow{SendID: r.Send, MachineID: machineID, Generation: r.Generation, Digest: r.Digest,
		Outcome: r.Outcome, Reason: r.Reason, Attempt: r.Attempt, HostVersion: r.HostVersion,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, Body: string(body), CreatedAt: now}
}

// reportColumns are the columns a report's row is inserted with, in the
// order of reportRowValues; reportCasts are as many placeholders, each
// cast to its column's type on PostgreSQL (in an INSERT's SELECT list a
// parameter does not take its type from the column it goes into).
const (
	reportColumns = `send_id, machine_id, generation, digest, outcome, reason, attempt, host_version,
		started_at, finished_at, body, created_at`
	reportCasts = `CAST(? AS text), CAST(? AS bigint), CAST(? AS bigint), CAST(? AS text), CAST(? AS text),
		CAST(? AS text), CAST(? AS bigint), CAST(? AS text), CAST(? AS timestamptz), CAST(? AS timestamptz),
		CAST(? AS text), CAST(? AS timestamptz)`
)

// reportRowValues are row's values in the order of reportColumns.
func reportRowValues(row *models.ReportRow) []any {
	return []any{row.SendID, row.MachineID, row.Generation, row.Digest, row.Outcome, row.Reason, row.Attempt,
		row.HostVersion, row.StartedAt, row.FinishedAt, row.Body, row.CreatedAt}
}

// setColumns spells up (column → value) as an UPDATE's SET list with its
// values in order. The columns are the store's own names
// (models.ReportUpdates), never a host's; sorted, the statement's text is
// the same for the same set (a statement kept by its text, on both
// engines).
func setColumns(up map[string]any) (string, []any) {
	cols := make([]string, 0, len(up))
	for c := range up {
		cols = append(cols, c)
	}
	slices.Sort(cols)
	var set strings.Builder
	vals := make([]any, 0, len(cols)+8)
	for i, c := range cols {
		if i > 0 {
			set.WriteString(", ")
		}
		set.WriteString(c + " = ?")
		vals = append(vals, up[c])
	}
	return set.String(), vals
}

// MaxReportsPage bounds the bodies one page of a machine's reports reads:
// a host's report may hold a megabyte, so a page of 500 could be half a
// gigabyte read, held and encoded for one viewer's request (or for the
// machine's page, refreshed every 2 s).
const MaxReportsPage = 4 << 20

// Reports lists a machine's reports newest first, at most limit of them
// and no more than MaxReportsPage of bodies (always one): cut says the
// page ended early for its bodies' size, and the list goes on after it.
func (s *Store) Reports(ctx context.Context, machineID int64, limit int, cursor int64) (rs []models.ReportRow, cut bool, err error) {
	db := s.db.WithContext(ctx)
	size := "octet_length(body)"
	if s.dialect == SQLite {
		size = "length(CAST(body AS BLOB))"
	}
	// The bodies' sizes first, their bytes not read into the controller.
	q := db.Table("reports").Select("id, "+size+" AS size").Where("machine_id = ?", machineID).Order("id DESC").Limit(limit)
	if cursor > 0 {
		q = q.Where("id < ?", cursor)
	}
	var sizes []struct {
		ID   int64
		Size int64
	}
	if err := q.Scan(&sizes).Error; err != nil || len(sizes) == 0 {
		return nil, false, mapErr(err)
	}
	ids, total := make([]int64, 0, len(sizes)), int64(0)
	for i, r := range sizes {
		if total += r.Size; i > 0 && total > MaxReportsPage {
			cut = true
			break
		}
		ids = append(ids, r.ID)
	}
	// The rows counted, by id: a report committed meanwhile is the next
	// page's to show (its id may be below one counted, on PostgreSQL).
	err = db.Where("machine_id = ? AND id IN ?", machineID, ids).Order("id DESC").Find(&rs).Error
	if len(rs) == 0 {
		cut = false // removed meanwhile (retention, the machine deleted)
	}
	return rs, cut, mapErr(err)
}
