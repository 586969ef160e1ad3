package store

import (
	"context"
	"database/sql"
	"errors"

	"mesh/models"

	"gorm.io/gorm"
)

// InsertSends writes send rows in one transaction: the group commit of polls
// woken together. A poll answers only after this has returned.
//
// On PostgreSQL the group is one INSERT whatever its size, its rows passed
// as one array per column (unnest): a multi-row INSERT with a parameter
// per field cost gorm's reflection and pgx's encoding per field, ~10 µs
// of the controller's CPU a row against ~3.5 µs. On SQLite the same in one
// JSON text (json_each) saved nothing measurable: there the engine's page
// writes and compiling the statement are the cost, so rows go through
// statements prepared once and kept (insertPrepared).
func (s *Store) InsertSends(ctx context.Context, sends []models.Send) error {
	if len(sends) == 0 {
		return nil
	}
	for i := range sends {
		if sends[i].CreatedAt.IsZero() {
			sends[i].CreatedAt = s.Now() // as gorm's insert did
		}
	}
	if err := s.prepareInserts(ctx, sendInsert); err != nil {
		return mapErr(err)
	}
	err := s.write(ctx, func(tx *Tx) error { return insertSendsIn(tx, sends) })
	if s.dialect == SQLite && foreignKeyFailed(err) {
		// On SQLite a send row still refers to its machine: one removed
		// after its poll was authorised failed the whole group. The group
		// is written again without it, and the error says whose rows
		// were not (every poll of a fan-out's group answered 500, before).
		return s.insertSendsOfMachinesLeft(ctx, sends)
	}
	return err
}

// insertSendsIn writes send rows in tx, in the dialect's way.
func insertSendsIn(tx *Tx, sends []models.Send) error {
	if len(sends) == 0 {
		return nil
	}
	if tx.s.dialect != Postgres {
		return insertSendsSQLite(tx.Statement.Context, tx, sends)
	}
	return insertSendsPostgres(tx.Statement.Context, tx, sends)
}

func insertSendsSQLite(ctx context.Context, tx *Tx, sends []models.Send) error {
	_, err := tx.insertPrepared(ctx, sendInsert, len(sends), func(i int, args []any) []any {
		snd := &sends[i]
		return append(args, snd.ID, snd.MachineID, snd.Generation, snd.Digest, snd.InstanceID, snd.Trigger, snd.CreatedAt, schemaOf(snd.Schema))
	})
	return err
}

// insertSendsOfMachinesLeft writes the rows of sends whose machines are
// still there, in one transaction, and returns *models.MachinesGoneError
// naming the others (nil when every machine is there).
func (s *Store) insertSendsOfMachinesLeft(ctx context.Context, sends []models.Send) error {
	gone := map[int64]bool{}
	err := s.write(ctx, func(tx *Tx) error {
		clear(gone)
		ids := make([]int64, 0, len(sends))
		for _, snd := range sends {
			ids = append(ids, snd.MachineID)
		}
		present, err := machinesPresent(tx, ids)
		if err != nil {
			return err
		}
		left := make([]models.Send, 0, len(sends))
		for _, snd := range sends {
			if present[snd.MachineID] {
				left = append(left, snd)
			} else {
				gone[snd.MachineID] = true
			}
		}
		return insertSendsSQLite(ctx, tx, left)
	})
	if err != nil {
		return err
	}
	if len(gone) > 0 {
		return &models.MachinesGoneError{Machines: gone}
	}
	return nil
}

// machinesPresent says which of the machines ids are there.
func machinesPresent(tx *Tx, ids []int64) (map[int64]bool, error) {
	present := make(map[int64]bool, len(ids))
	in, arg := inID(tx, "id", ids)
	err := each(tx.DB, func(r *sql.Rows) error {
		var id int64
		if err := r.Scan(&id); err != nil {
			return err
		}
		present[id] = true
		return nil
	}, `SELECT id FROM machines WHERE `+in, arg)
	return present, err
}

// foreignKeyFailed says whether err is SQLite refusing a row whose
// reference is gone (SQLITE_CONSTRAINT_FOREIGNKEY).
func foreignKeyFailed(err error) bool {
	var coded interface{ Code() int }
	return errors.As(err, &coded) && coded.Code() == sqliteConstraintForeignKey
}

// sqliteConstraintForeignKey is SQLite's extended result code 787.
const sqliteConstraintForeignKey = 787

// sendInsert is how send rows are inserted on SQLite.
var sendInsert = &preparedInsert{table: "sends",
	columns: []string{"id", "machine_id", "generation", "digest", "instance_id", "trigger", "created_at", "schema"}}

// schemaOf is a row's schema, the column's default (1) when unset.
func schemaOf(schema int) int64 {
	if schema == 0 {
		return models.SchemaV1
	}
	return int64(schema)
}

// insertSendsPostgres copies the group in (COPY, see copyRows), the
// epoch read once for the group (the column's default reads it for every
// row: ~15 µs a row).
func insertSendsPostgres(ctx context.Context, tx *Tx, sends []models.Send) error {
	epoch, err := currentEpoch(tx)
	if err != nil {
		return err
	}
	_, err = tx.copyRows("sends", sendColumns, len(sends), func(i int) []any {
		snd := &sends[i]
		return []any{snd.ID, snd.MachineID, snd.Generation, snd.Digest, snd.InstanceID, snd.Trigger, snd.CreatedAt,
			schemaOf(snd.Schema), epoch}
	})
	return err
}

// sendColumns are the columns a send row is copied in with (PostgreSQL).
var sendColumns = []string{"id", "machine_id", "generation", "digest", "instance_id", "trigger", "created_at", "schema", "epoch"}

// Sends lists sends newest first (ids are time-ordered UUIDv7), of one
// machine when machineID > 0, after cursor (a send id).
func (s *Store) Sends(ctx context.Context, machineID int64, limit int, cursor string) ([]models.SendView, error) {
	var rows []struct {
		models.Send
		Name string
	}
	q := s.db.WithContext(ctx).Table("sends").Select("sends.*, machines.name AS name").
		Joins("JOIN machines ON machines.id = sends.machine_id").Order("sends.id DESC").Limit(limit)
	if machineID > 0 {
		q = q.Where("sends.machine_id = ?", machineID)
	}
	if cursor != "" {
		q = q.Where("sends.id < ?", cursor)
	}
	if err := q.Scan(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make([]models.SendView, len(rows))
	ids := make([]string, len(rows))
	for i, r := range rows {
		r.Send.Machine = r.Name
		out[i] = models.SendView{Send: r.Send}
		ids[i] = r.ID
	}
	if len(ids) == 0 {
		return out, nil
	}
	// A send's outcome is the latest final report naming it; else the
	// latest report of any kind; never written over the send. A refusal of
	// the host release the declaration named is not its outcome: the
	// declaration was applied, and only the release was refused. The
	// reports' bodies are not read (a host's may be a megabyte each).
	var reps []models.ReportRow
	if err := s.db.WithContext(ctx).Select("id", "send_id", "outcome", "reason").Where("send_id IN ?", ids).Order("id").Find(&reps).Error; err != nil {
		return nil, mapErr(err)
	}
	final := func(r models.ReportRow) bool {
		return models.FinalOutcome(r.Outcome) && !models.RefusesRelease(r.Outcome, r.Reason)
	}
	by := map[string]models.ReportRow{}
	for _, r := range reps {
		prev, ok := by[r.SendID]
		if !ok || final(r) || !final(prev) {
			by[r.SendID] = r
		}
	}
	for i := range out {
		if r, ok := by[out[i].ID]; ok {
			out[i].Outcome, out[i].Reason = r.Outcome, r.Reason
		}
	}
	return out, nil
}

// Send reads one send.
func (s *Store) Send(ctx context.Context, id string) (*models.Send, error) {
	var snd models.Send
	if err := s.db.WithContext(ctx).Where("id = ?", id).First(&snd).Error; err != nil {
		return nil, mapErr(err)
	}
	return &snd, nil
}

// CountSends counts every send on record.
func (s *Store) CountSends(ctx context.Context) (int64, error) {
	var n int64
	return n, mapErr(s.db.WithContext(ctx).Model(&models.Send{}).Count(&n).Error)
}

// currentSends reads, for each of ms that is behind, the sends of its
// current generation (its state's words say whether it was sent it); a
// machine that finished its generation reads none.
func currentSends(db *gorm.DB, ms []models.Machine) (map[int64]models.PendingSend, error) {
	out := map[int64]models.PendingSend{}
	var ids []int64
	for i := range ms {
		if ms[i].Generation > ms[i].FinishedGen {
			ids = append(ids, ms[i].ID)
		}
	}
	err := inChunks(ids, 500, func(chunk []int64) error {
		var rows []models.Send
		err := db.Table("sends").Select("sends.machine_id, sends.created_at, sends.instance_id").
			Joins("JOIN machines ON machines.id = sends.machine_id AND machines.generation = sends.generation").
			Where("sends.machine_id IN ?", chunk).Scan(&rows).Error
		if err != nil {
			return err
		}
		for _, r := range rows {
			p := out[r.MachineID]
			p.N++
			if r.CreatedAt.After(p.At) {
				p.At, p.Instance = r.CreatedAt, r.InstanceID
			}
			out[r.MachineID] = p
		}
		return nil
	})
	return out, err
}
