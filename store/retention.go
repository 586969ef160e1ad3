package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"gorm.io/gorm"

	"mesh/models"
)

// Retention says how long sends, reports and declarations are kept.
type Retention struct {
	// Keep is the age past which rows go, save those a machine still
	// needs (models.Keeps).
	Keep time.Duration
	// Span is how long an epoch lasts on PostgreSQL (0: Keep/8): a
	// partition is dropped once the epoch after it started Keep ago, so
	// rows live at most Keep+Span.
	Span time.Duration
	// Batch is how many old rows one transaction judges and removes on
	// SQLite (0: 200), so the write lock is held briefly between the
	// send writer's commits.
	Batch int
}

// RetentionResult says what one run removed and kept.
type RetentionResult struct {
	// Removed counts the rows removed (deleted, or in a dropped partition).
	Removed int64
	// Carried counts the rows a machine still needed, carried forward to
	// the current epoch before their partition was dropped (PostgreSQL).
	Carried int64
	// Dropped are the epochs whose partitions were dropped.
	Dropped []int64
}

// retainedTables are the tables retention trims, with the column that
// says when a row happened.
var retainedTables = []struct{ name, at string }{
	{"reports", "created_at"}, {"sends", "created_at"}, {"declarations", "composed_at"},
}

// RunRetention removes sends, reports and declarations older than r.Keep
// that no machine still needs. On PostgreSQL it also creates the next
// epochs' partitions ahead and opens a new epoch every r.Span; a dropped
// partition's needed rows are carried forward first. On SQLite old rows
// are deleted in small batches.
func (s *Store) RunRetention(ctx context.Context, r Retention) (RetentionResult, error) {
	if r.Keep <= 0 {
		return RetentionResult{}, fmt.Errorf("retention: keep must be positive, not %s", r.Keep)
	}
	if r.Span <= 0 {
		r.Span = r.Keep / 8
	}
	if r.Batch <= 0 {
		r.Batch = 200
	}
	if s.dialect == Postgres {
		return s.retainPartitions(ctx, r)
	}
	return s.retainBatches(ctx, r)
}

// RecordSince is when the oldest send on record was made (nil: none):
// how far back the record goes. A send's id is a UUIDv7, made with its
// row: the lowest id is the oldest send.
func (s *Store) RecordSince(ctx context.Context) (*time.Time, error) {
	var at []time.Time
	err := s.db.WithContext(ctx).Table("sends").Order("id").Limit(1).Pluck("created_at", &at).Error
	if err != nil || len(at) == 0 {
		return nil, mapErr(err)
	}
	return &at[0], nil
}

// keepsOf reads, for each machine, what retention must keep of its records.
func keepsOf(tx *Tx, machines []int64) (map[int64]*models.Keeps, error) {
	out := make(map[int64]*models.Keeps, len(machines))
	err := inChunks(machines, 500, func(ids []int64) error {
		var ms []models.Machine
		if err := tx.Select("id", "generation", "applied_generation", "finished_generation", "generation_at").Where("id IN ?", ids).Find(&ms).Error; err != nil {
			return err
		}
		lately := tx.s.Now().Add(-models.UnsentKept)
		for _, m := range ms {
			out[m.ID] = &models.Keeps{Generation: m.Generation, AppliedGeneration: m.AppliedGeneration, FinishedGeneration: m.FinishedGen,
				MovedLately: m.GenerationAt.After(lately)}
		}
		type latest struct {
			MachineID int64
			ID        string
		}
		var ls []latest
		if err := tx.Table("sends").Select("machine_id, max(id) AS id").Where("machine_id IN ?", ids).
			Group("machine_id").Scan(&ls).Error; err != nil {
			return err
		}
		sendIDs := make([]string, 0, len(ls))
		for _, l := range ls {
			sendIDs = append(sendIDs, l.ID)
		}
		var sends []models.Send
		if len(sendIDs) > 0 {
			if err := tx.Select("id", "machine_id", "generation").Where("id IN ?", sendIDs).Find(&sends).Error; err != nil {
				return err
			}
		}
		for _, snd := range sends {
			if k := out[snd.MachineID]; k != nil {
				k.LatestSend, k.LatestSendGeneration = snd.ID, snd.Generation
			}
		}
		type latestReport struct {
			MachineID int64
			ID        int64
		}
		var lr, la []latestReport
		if err := tx.Table("reports").Select("machine_id, max(id) AS id").Where("machine_id IN ?", ids).
			Group("machine_id").Scan(&lr).Error; err != nil {
			return err
		}
		if err := tx.Table("reports").Select("machine_id, max(id) AS id").Where("machine_id IN ? AND outcome = ?", ids, models.OutcomeApplied).
			Group("machine_id").Scan(&la).Error; err != nil {
			return err
		}
		var lv []latestReport
		if err := tx.Table("reports").Select("reports.machine_id, max(reports.id) AS id").
			Joins("JOIN declarations ON declarations.machine_id = reports.machine_id AND declarations.generation = reports.generation AND declarations.digest = reports.digest").
			Where("reports.machine_id IN ? AND reports.outcome = ? AND reports.send_id <> '' AND declarations.schema = ?", ids, models.OutcomeApplied, models.SchemaV1).
			Group("reports.machine_id").Scan(&lv).Error; err != nil {
			return err
		}
		reportIDs := make([]int64, 0, len(lr)+len(la)+len(lv))
		for _, l := range lr {
			if k := out[l.MachineID]; k != nil {
				k.LatestReport = l.ID
				reportIDs = append(reportIDs, l.ID)
			}
		}
		for _, l := range la {
			if k := out[l.MachineID]; k != nil {
				k.LatestApplied = l.ID
				reportIDs = append(reportIDs, l.ID)
			}
		}
		for _, l := range lv {
			if k := out[l.MachineID]; k != nil {
				k.LatestAppliedV1 = l.ID
				reportIDs = append(reportIDs, l.ID)
			}
		}
		var reps []models.ReportRow
		if len(reportIDs) > 0 {
			if err := tx.Select("id", "machine_id", "send_id", "generation").Where("id IN ?", reportIDs).Find(&reps).Error; err != nil {
				return err
			}
		}
		for _, rep := range reps {
			if k := out[rep.MachineID]; k != nil && rep.SendID != "" {
				k.ReportSends = append(k.ReportSends, rep.SendID)
				k.ReportGenerations = append(k.ReportGenerations, rep.Generation)
			}
		}
		type latestDecl struct {
			MachineID  int64
			Generation int64
		}
		var ld []latestDecl
		if err := tx.Table("declarations").Select("machine_id, max(generation) AS generation").Where("machine_id IN ?", ids).
			Group("machine_id").Scan(&ld).Error; err != nil {
			return err
		}
		for _, l := range ld {
			if k := out[l.MachineID]; k != nil {
				k.LatestDeclared = l.Generation
			}
		}
		return nil
	})
	return out, err
}

// oldRow is a row retention judges: its key, machine, generation.
type oldRow struct {
	ID         string // a send's id, or a report's or declaration's number as text
	Num        int64
	MachineID  int64
	Generation int64
}

// kept says whether a machine still needs the row of table.
func kept(table string, row oldRow, keeps map[int64]*models.Keeps) bool {
	k := keeps[row.MachineID]
	if k == nil {
		return false // its machine is gone (its rows go with it)
	}
	switch table {
	case "sends":
		return k.KeepSend(row.ID, row.Generation)
	case "reports":
		return k.KeepReport(row.Num)
	default:
		return k.KeepDeclaration(row.Generation)
	}
}

// judge splits rows into those a machine still needs and the rest.
// dropping is the epoch whose partitions are about to go (PostgreSQL; -1
// on SQLite): its sends are not on record any more unless carried.
func judge(tx *Tx, table string, rows []oldRow, dropping int64) (keep, drop []oldRow, err error) {
	seen := map[int64]bool{}
	var machines []int64
	for _, r := range rows {
		if !seen[r.MachineID] {
			seen[r.MachineID] = true
			machines = append(machines, r.MachineID)
		}
	}
	keeps, err := keepsOf(tx, machines)
	if err != nil {
		return nil, nil, err
	}
	switch table {
	case "sends":
		if err := reportedSends(tx, machines, rows, dropping, keeps); err != nil {
			return nil, nil, err
		}
	case "declarations":
		if err := sentGenerations(tx, machines, rows, dropping, keeps); err != nil {
			return nil, nil, err
		}
	}
	for _, r := range rows {
		if kept(table, r, keeps) {
			keep = append(keep, r)
		} else {
			drop = append(drop, r)
		}
	}
	return keep, drop, nil
}

// sentGenerations fills each machine's Keeps.SentGenerations with those
// of rows' generations that have a send on record: its declaration is
// what that send carried, kept as long as the send is, however long ago
// it was composed (a declaration composed before the keep period and sent
// within it was removed from under its send). Sends are judged before
// declarations, so every send still here stays — but those of the epoch
// being dropped.
func sentGenerations(tx *Tx, machines []int64, rows []oldRow, dropping int64, keeps map[int64]*models.Keeps) error {
	gens := map[int64]bool{}
	for _, r := range rows {
		gens[r.Generation] = true
	}
	return inChunks(machines, 500, func(chunk []int64) error {
		var pairs []struct{ MachineID, Generation int64 }
		if err := tx.Table("sends").Distinct("machine_id", "generation").
			Where("machine_id IN ? AND generation IN ? AND epoch <> ?", chunk, keysOf(gens), dropping).Scan(&pairs).Error; err != nil {
			return err
		}
		for _, p := range pairs {
			if k := keeps[p.MachineID]; k != nil {
				k.SentGenerations = append(k.SentGenerations, p.Generation)
			}
		}
		return nil
	})
}

// reportedSends adds to each machine's Keeps.ReportSends those of rows'
// sends that a report on record names: a report younger than the keep
// period (a renewal's or a check's, naming the applied send again and
// again) stays, and so does the send it is about, though that is no
// longer the machine's applied one; and a report of it still in a host's
// outbox is taken, not refused for naming no send. Reports are judged
// before sends, so every report still here stays — but those of the epoch
// being dropped.
func reportedSends(tx *Tx, machines []int64, rows []oldRow, dropping int64, keeps map[int64]*models.Keeps) error {
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return inChunks(machines, 500, func(chunk []int64) error {
		var named []struct {
			MachineID int64
			SendID    string
		}
		if err := tx.Table("reports").Distinct("machine_id", "send_id").
			Where("machine_id IN ? AND send_id IN ? AND epoch <> ?", chunk, ids, dropping).Scan(&named).Error; err != nil {
			return err
		}
		for _, n := range named {
			if k := keeps[n.MachineID]; k != nil {
				k.ReportSends = append(k.ReportSends, n.SendID)
			}
		}
		return nil
	})
}

// keyColumn selects a table's key as oldRow's ID or Num.
func keyColumn(table string) string {
	if table == "sends" {
		return "id AS id"
	}
	return "id AS num"
}

func rowKeys(table string, rows []oldRow) any {
	if table == "sends" {
		ks := make([]string, len(rows))
		for i, r := range rows {
			ks[i] = r.ID
		}
		return ks
	}
	ks := make([]int64, len(rows))
	for i, r := range rows {
		ks[i] = r.Num
	}
	return ks
}

// retainBatches is SQLite's retention: old rows read a page at a time
// outside any transaction, then judged and deleted in a short write
// transaction of their own (the judging read inside it, so a row that
// became needed meanwhile stays). Between batches the send writer and
// composing take the write lock in turn.
func (s *Store) retainBatches(ctx context.Context, r Retention) (RetentionResult, error) {
	var res RetentionResult
	cutoff := s.Now().Add(-r.Keep)
	for _, t := range retainedTables {
		after := ""
		var afterNum int64
		for {
			var rows []oldRow
			q := s.db.WithContext(ctx).Table(t.name).Select(keyColumn(t.name)+", machine_id, generation").
				Where(t.at+" < ?", cutoff).Order("id").Limit(r.Batch)
			if t.name == "sends" {
				// Bounded by the ids' time too: sends have no index on
				// created_at, and the scan in id order stops past it.
				q = q.Where("id > ? AND id < ?", after, sendIDBefore(cutoff.Add(time.Minute)))
			} else {
				q = q.Where("id > ?", afterNum)
			}
			if err := q.Scan(&rows).Error; err != nil {
				return res, mapErr(err)
			}
			if len(rows) == 0 {
				break
			}
			after, afterNum = rows[len(rows)-1].ID, rows[len(rows)-1].Num
			n, err := Write(ctx, s, func(tx *Tx) (int64, error) {
				_, drop, err := judge(tx, t.name, rows, -1)
				if err != nil || len(drop) == 0 {
					return 0, err
				}
				del := tx.Exec("DELETE FROM "+t.name+" WHERE id IN ?", rowKeys(t.name, drop))
				return del.RowsAffected, del.Error
			})
			if err != nil {
				return res, err
			}
			res.Removed += n
			if len(rows) < r.Batch {
				break
			}
		}
	}
	return res, nil
}

// sendIDBefore is the lowest send id (a UUIDv7, whose text begins with
// its milliseconds since 1970 in hex, "tttttttt-tttt-7…") of a send made
// at t or later: every id made before t sorts below it.
func sendIDBefore(t time.Time) string {
	h := fmt.Sprintf("%012x", t.UnixMilli())
	return h[:8] + "-" + h[8:]
}

// retentionLock is the PostgreSQL advisory lock (one per store) that
// inserts of declarations take shared and moving the epoch on takes
// exclusive, so that no declaration is inserted while the epoch changes:
// with the epoch read under it, (machine, generation) stays unique across
// partitions (storeComposed).
func (s *Store) retentionLock() int64 {
	h := fnv.New64a()
	h.Write([]byte("mesh-retention " + s.channel))
	return int64(h.Sum64())
}

// epochAhead is how many epochs past the current one have their
// partitions ready: the worker creates them well before an insert can
// need them.
const epochAhead = 2

type epochRow struct {
	Epoch     int64
	StartedAt time.Time
}

// retainPartitions is PostgreSQL's retention: partitions made ahead, a
// new epoch every span, and each epoch whose successor started more than
// keep ago dropped, after the rows a machine still needs are carried
// forward (an UPDATE of the epoch: the row moves partition, its times
// stay).
func (s *Store) retainPartitions(ctx context.Context, r Retention) (RetentionResult, error) {
	var res RetentionResult
	now := s.Now()
	err := s.write(ctx, func(tx *Tx) error {
		if err := lockRetention(tx, true); err != nil {
			return err
		}
		epochs, err := readEpochs(tx.DB)
		if err != nil {
			return err
		}
		cur := epochs[len(epochs)-1]
		if err := makePartitions(tx, cur.Epoch); err != nil {
			return err
		}
		if now.Sub(cur.StartedAt) < r.Span {
			return nil
		}
		if err := tx.Exec("INSERT INTO retention_epochs (epoch, started_at) VALUES (?, ?)", cur.Epoch+1, now).Error; err != nil {
			return err
		}
		return makePartitions(tx, cur.Epoch+1)
	})
	if err != nil {
		return res, err
	}
	for {
		epochs, err := readEpochs(s.db.WithContext(ctx))
		if err != nil {
			return res, mapErr(err)
		}
		// The oldest epoch goes when the one after it started before
		// the cutoff: every row written in it is older than keep.
		if len(epochs) < 2 || !epochs[1].StartedAt.Before(now.Add(-r.Keep)) {
			return res, nil
		}
		old, cur := epochs[0].Epoch, epochs[len(epochs)-1].Epoch
		if err := s.dropEpoch(ctx, old, cur, r.Batch*5, &res); err != nil {
			return res, err
		}
	}
}

// lockRetention takes the retention lock: exclusive to move the epoch on
// (with a bound on waiting for the tables: making a partition locks its
// parent), shared to insert declarations.
func lockRetention(tx *Tx, exclusive bool) error {
	if exclusive {
		if err := tx.Exec("SET LOCAL lock_timeout = '5s'").Error; err != nil {
			return err
		}
	}
	fn := "pg_advisory_xact_lock_shared"
	if exclusive {
		fn = "pg_advisory_xact_lock"
	}
	return tx.Exec("SELECT "+fn+"(?)", tx.s.retentionLock()).Error
}

// currentEpoch is the epoch rows are written in now (PostgreSQL).
func currentEpoch(tx *Tx) (int64, error) {
	var e int64
	return e, tx.Raw("SELECT mesh_epoch()").Scan(&e).Error
}

func readEpochs(tx *gorm.DB) ([]epochRow, error) {
	var epochs []epochRow
	if err := tx.Raw("SELECT epoch, started_at FROM retention_epochs ORDER BY epoch").Scan(&epochs).Error; err != nil {
		return nil, err
	}
	if len(epochs) == 0 {
		return nil, fmt.Errorf("retention: no epoch in retention_epochs")
	}
	return epochs, nil
}

// makePartitions makes sure the partitions of epochs cur..cur+epochAhead
// exist, creating only those missing (creating one locks its parent).
func makePartitions(tx *Tx, cur int64) error {
	locked := false
	for e := cur; e <= cur+epochAhead; e++ {
		for _, t := range retainedTables {
			name := fmt.Sprintf("%s_e%d", t.name, e)
			var exists bool
			if err := tx.Raw("SELECT to_regclass(?) IS NOT NULL", name).Scan(&exists).Error; err != nil {
				return err
			}
			if exists {
				continue
			}
			if !locked {
				// A partition of a table with a foreign key to machines
				// locks the parent, then machines; a report's statement
				// locks machines (its row), then reports. machines first
				// here too, so the two wait on each other in one order
				// rather than deadlock.
				if err := tx.Exec("LOCK TABLE machines IN SHARE ROW EXCLUSIVE MODE").Error; err != nil {
					return err
				}
				locked = true
			}
			if err := tx.Exec(fmt.Sprintf("CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (%d) TO (%d)", name, t.name, e, e+1)).Error; err != nil {
				return err
			}
		}
	}
	return nil
}

// dropEpoch carries forward to epoch cur the rows of epoch old that a
// machine still needs, a page at a time in short transactions of their
// own, then drops old's partitions. No lock is needed to carry: nothing
// writes into an epoch that ended keep ago, and a carried row is one
// that already exists, so no insert can meet it twice. The drop itself
// waits at most lock_timeout for its tables.
func (s *Store) dropEpoch(ctx context.Context, old, cur int64, page int, res *RetentionResult) error {
	for _, t := range retainedTables {
		after, afterNum := "", int64(0)
		for {
			var rows []oldRow
			q := s.db.WithContext(ctx).Table(t.name).Select(keyColumn(t.name)+", machine_id, generation").
				Where("epoch = ?", old).Order("id").Limit(page)
			if t.name == "sends" {
				q = q.Where("id > ?", after)
			} else {
				q = q.Where("id > ?", afterNum)
			}
			if err := q.Scan(&rows).Error; err != nil {
				return mapErr(err)
			}
			if len(rows) == 0 {
				break
			}
			after, afterNum = rows[len(rows)-1].ID, rows[len(rows)-1].Num
			err := s.write(ctx, func(tx *Tx) error {
				keep, drop, err := judge(tx, t.name, rows, old)
				if err != nil {
					return err
				}
				if len(keep) > 0 {
					if err := tx.Exec("UPDATE "+t.name+" SET epoch = ? WHERE epoch = ? AND id IN ?", cur, old, rowKeys(t.name, keep)).Error; err != nil {
						return err
					}
				}
				res.Carried += int64(len(keep))
				res.Removed += int64(len(drop))
				return nil
			})
			if err != nil {
				return err
			}
			if len(rows) < page {
				break
			}
		}
	}
	return s.write(ctx, func(tx *Tx) error {
		if err := tx.Exec("SET LOCAL lock_timeout = '5s'").Error; err != nil {
			return err
		}
		for _, t := range retainedTables {
			if err := tx.Exec(fmt.Sprintf("DROP TABLE IF EXISTS %s_e%d", t.name, old)).Error; err != nil {
				return err
			}
		}
		res.Dropped = append(res.Dropped, old)
		return tx.Exec("DELETE FROM retention_epochs WHERE epoch = ?", old).Error
	})
}
