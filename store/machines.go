package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"mesh/models"
)

// lockMachine reads a machine row for update: on PostgreSQL a row lock, on
// SQLite the immediate transaction already holds the database's write lock.
func lockMachine(tx *Tx, name string) (*models.Machine, error) {
	var m models.Machine
	q := tx.DB
	if tx.s.dialect == Postgres {
		q = q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	if err := q.Where("name = ?", name).First(&m).Error; err != nil {
		return nil, fmt.Errorf("machine %s: %w", name, mapErr(err))
	}
	return &m, nil
}

// checkIfMatch enforces the optimistic lock on a machine's desired state.
func checkIfMatch(m *models.Machine, ifMatch *int64) error {
	if ifMatch == nil {
		return models.ErrPreconditionNeeded
	}
	if *ifMatch != m.Generation {
		return fmt.Errorf("%w: machine %s is at generation %d, the request was made from %d", models.ErrStaleGeneration, m.Name, m.Generation, *ifMatch)
	}
	return nil
}

// bumpWhere moves machines on by a generation, with its trigger and time;
// the machines' condition follows.
const bumpWhere = `UPDATE machines SET generation = generation + 1, generation_trigger = ?, generation_at = ? WHERE `

// bumpGenerations advances the generation of every machine in ids, in the
// transaction that changed what they should be, and remembers the bumps so
// waiting polls are woken once it commits.
func bumpGenerations(tx *Tx, ids []int64, trigger string) error {
	now := tx.s.Now()
	return inChunks(ids, 1000, func(chunk []int64) error {
		// The ids as one parameter and the rows scanned directly: a change
		// to a module bumps every machine it runs on before any of them
		// is composed, so this is on the path of every fan-out.
		rows := make([]models.Bump, 0, len(chunk))
		in, arg := inID(tx, "id", chunk)
		scan := func(r *sql.Rows) error {
			var b models.Bump
			if err := r.Scan(&b.MachineID, &b.Name, &b.Generation); err != nil {
				return err
			}
			rows = append(rows, b)
			return nil
		}
		bump := bumpWhere + in
		var err error
		if tx.s.dialect == Postgres {
			err = each(tx.DB, scan, bump+` RETURNING id, name, generation`, trigger, now, arg)
		} else if err = tx.Exec(bump, trigger, now, arg).Error; err == nil {
			// SQLite's RETURNING cost the bump more than reading the rows
			// again in the same transaction (which holds the write lock):
			// 10,000 machines 85–96 against 70–76 ms.
			err = each(tx.DB, scan, `SELECT id, name, generation FROM machines WHERE `+in, arg)
		}
		if err != nil {
			return err
		}
		tx.bumps = append(tx.bumps, rows...)
		if tx.s.dialect == Postgres {
			return notifyBumps(tx, rows)
		}
		return nil
	})
}

// bumpAssigned advances the generation of every machine assigned the
// module (10,000 or 100,000 of them, on the path of the fan-out before any
// is composed), as bumpGenerations does, their ids scanned directly rather
// than by gorm's Pluck, which reflects over each. On SQLite, whose
// transaction holds the only write turn, each machine's name and
// generation are read with its id, so the update is not followed by
// reading them back: a read of every machine fewer on the change's path
// (BenchmarkSetCurrent_10000 on SQLite 52 → 43 ms).
func bumpAssigned(tx *Tx, moduleID int64, trigger string) error {
	if tx.s.dialect != SQLite {
		var ids []int64
		if err := each(tx.DB, func(r *sql.Rows) error {
			var id int64
			err := r.Scan(&id)
			ids = append(ids, id)
			return err
		}, `SELECT machine_id FROM assignments WHERE module_id = ? ORDER BY machine_id`, moduleID); err != nil {
			return err
		}
		return bumpGenerations(tx, ids, trigger)
	}
	var bs []models.Bump
	if err := each(tx.DB, func(r *sql.Rows) error {
		var b models.Bump
		err := r.Scan(&b.MachineID, &b.Name, &b.Generation)
		b.Generation++
		bs = append(bs, b)
		return err
	}, `SELECT m.id, m.name, m.generation FROM assignments a JOIN machines m ON m.id = a.machine_id
		WHERE a.module_id = ? ORDER BY m.id`, moduleID); err != nil {
		return err
	}
	now := tx.s.Now()
	ids := make([]int64, len(bs))
	for i, b := range bs {
		ids[i] = b.MachineID
	}
	if err := inChunks(ids, 1000, func(chunk []int64) error {
		in, arg := inID(tx, "id", chunk)
		return tx.Exec(bumpWhere+in, trigger, now, arg).Error
	}); err != nil {
		return err
	}
	tx.bumps = append(tx.bumps, bs...)
	return nil
}

// notifyChannel names the channel that carries bumped generations between
// instances on PostgreSQL. NOTIFY is database-wide, so the name is made
// from the database and schema: two meshes in one database never hear
// each other.
func notifyChannel(db, schema string) string {
	h := sha256.Sum256([]byte(db + "\x00" + schema))
	return "mesh_generation_" + hex.EncodeToString(h[:6])
}

// notifyBumps announces bumps to every instance's listener. NOTIFY in the
// bumping transaction is delivered when it commits, never before, and not
// at all if it rolls back. A payload stays under PostgreSQL's 8000 bytes.
func notifyBumps(tx *Tx, bs []models.Bump) error {
	var b strings.Builder
	flush := func() error {
		if b.Len() == 0 {
			return nil
		}
		err := tx.Exec("SELECT pg_notify(?, ?)", tx.s.channel, b.String()).Error
		b.Reset()
		return err
	}
	for _, x := range bs {
		if b.Len() > 7000 {
			if err := flush(); err != nil {
				return err
			}
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d", x.MachineID, x.Generation)
	}
	return flush()
}

// ParseNotification reads a notification's bumps ("id:gen,id:gen").
func ParseNotification(payload string) []models.Bump {
	var out []models.Bump
	for _, part := range strings.Split(payload, ",") {
		id, gen, ok := strings.Cut(part, ":")
		if !ok {
			continue
		}
		i, err1 := strconv.ParseInt(id, 10, 64)
		g, err2 := strconv.ParseInt(gen, 10, 64)
		if err1 == nil && err2 == nil {
			out = append(out, models.Bump{MachineID: i, Generation: g})
		}
	}
	return out
}

// Enroll spends a join token and registers a machine. The machine starts at
// generation 1 (trigger enrol), or past the last generation of a machine
// its name was before (machine_generations): an empty declaration it may
// apply while it runs nothing.
func (s *Store) Enroll(ctx context.Context, tokenHash, name, os, arch, hostVersion, schema, tokenID string) (*models.Machine, error) {
	var m models.Machine
	err := s.write(ctx, func(tx *Tx) error {
		now := s.Now()
		var jt models.JoinToken
		q := tx.DB
		if s.dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		if err := q.Where("token_hash = ?", tokenHash).First(&jt).Error; err != nil {
			return models.ErrTokenUsed
		}
		if !jt.Spendable(now) {
			return models.ErrTokenUsed
		}
		var n int64
		if err := tx.Model(&models.Machine{}).Where("name = ?", name).Count(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: machine %s is already enrolled", models.ErrConflict, name)
		}
		if err := tx.Model(&jt).Updates(map[string]any{"used_at": now, "used_by": name}).Error; err != nil {
			return err
		}
		// A name enrolled before starts past its earlier machine's last
		// generation (machine_generations).
		var start int64
		if err := tx.Raw("SELECT COALESCE(MAX(generation), 0) FROM machine_generations WHERE name = ?", name).Scan(&start).Error; err != nil {
			return err
		}
		// Never past MaxGeneration (a host said the top of int64 before it
		// was deleted): the new machine's first bump needs room.
		start = min(start, models.MaxGeneration)
		m = models.Machine{Name: name, OS: os, Arch: arch, HostVersion: hostVersion, Schema: schema,
			Generation: start, GenerationAt: now, Running: "{}", TokenID: tokenID, LastSeen: &now, CreatedAt: now}
		if err := tx.Create(&m).Error; err != nil {
			return err
		}
		if err := audit(tx, "host:"+name, "enroll", "machine/"+name, fmt.Sprintf("%s/%s host %s", os, arch, hostVersion)); err != nil {
			return err
		}
		if err := labelsAtEnrol(tx, &m, &jt); err != nil {
			return err
		}
		if err := bumpGenerations(tx, []int64{m.ID}, models.TriggerEnrol); err != nil {
			return err
		}
		m.Generation = start + 1
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &m, nil
}

// Machine reads one machine by name.
func (s *Store) Machine(ctx context.Context, name string) (*models.Machine, error) {
	var m models.Machine
	if err := s.db.WithContext(ctx).Where("name = ?", name).First(&m).Error; err != nil {
		return nil, fmt.Errorf("machine %s: %w", name, mapErr(err))
	}
	return &m, nil
}

// MachineSent reads a machine and what was sent of its current generation
// (currentSends) in one snapshot of the store: read apart, a generation
// made between the two reads was said "not sent yet" of the generation
// before it, which had been sent.
func (s *Store) MachineSent(ctx context.Context, name string) (*models.Machine, models.PendingSend, error) {
	var m models.Machine
	var sent map[int64]models.PendingSend
	err := s.snapshot(ctx, func(tx *Tx) error {
		if err := tx.Where("name = ?", name).First(&m).Error; err != nil {
			return fmt.Errorf("machine %s: %w", name, mapErr(err))
		}
		var err error
		sent, err = currentSends(tx.DB, []models.Machine{m})
		return err
	})
	if err != nil {
		return nil, models.PendingSend{}, err
	}
	return &m, sent[m.ID], nil
}

// MachinesSent lists machines newest first, after cursor (an id; 0 = from
// the top), with what was sent of each one's current generation
// (currentSends), in one snapshot of the store (MachineSent).
func (s *Store) MachinesSent(ctx context.Context, limit int, cursor int64) ([]models.Machine, map[int64]models.PendingSend, error) {
	var ms []models.Machine
	var sent map[int64]models.PendingSend
	err := s.snapshot(ctx, func(tx *Tx) error {
		q := tx.Order("id DESC").Limit(limit)
		if cursor > 0 {
			q = q.Where("id < ?", cursor)
		}
		if err := q.Find(&ms).Error; err != nil {
			return err
		}
		var err error
		sent, err = currentSends(tx.DB, ms)
		return err
	})
	return ms, sent, err
}

// MachineHeads are what the long-poll hub keeps in memory for every machine.
type MachineHead struct {
	ID          int64
	Name        string
	Generation  int64
	Conflict    bool
	HostVersion string
	Schema      string
	TokenID     string
	LastSeen    *time.Time
	CertInUse   string
}

// MachineHeads reads the hub's view of every machine.
func (s *Store) MachineHeads(ctx context.Context) ([]MachineHead, error) {
	var hs []MachineHead
	err := s.db.WithContext(ctx).Model(&models.Machine{}).
		Select("id, name, generation, conflict, host_version, schema, token_id, last_seen, cert_in_use").Scan(&hs).Error
	return hs, mapErr(err)
}

// Seen is when a machine's host was last seen by this instance.
type Seen struct {
	ID int64
	At time.Time
}

// FlushLastSeen sets last_seen for the machines seen since the last flush,
// each to its own time (never back: another instance may have seen the
// host since): one statement per interval however many polls there were.
// The time a flush runs is no machine's: written for all, a host that
// died just after a flush was shown as seen until the next, up to an
// interval after it was gone.
func (s *Store) FlushLastSeen(ctx context.Context, seen []Seen) error {
	return inChunks(seen, 20000, func(chunk []Seen) error {
		ids := make([]int64, len(chunk))
		for i, e := range chunk {
			ids[i] = e.ID
		}
		if s.dialect == Postgres {
			b := make([]byte, 0, len(chunk)*36+2)
			b = append(b, '{')
			for i, e := range chunk {
				if i > 0 {
					b = append(b, ',')
				}
				b = e.At.UTC().AppendFormat(b, time.RFC3339Nano)
			}
			return mapErr(s.db.WithContext(ctx).Exec(`UPDATE machines AS m SET last_seen = GREATEST(m.last_seen, u.at)
				FROM unnest(CAST(? AS bigint[]), CAST(? AS timestamptz[])) AS u (id, at) WHERE m.id = u.id`,
				int64Array(ids, '{', '}'), string(append(b, '}'))).Error)
		}
		// {"id": "time", …}, the time as the driver writes one
		// (_time_format=sqlite), so it compares as every other does.
		b := make([]byte, 0, len(chunk)*48+2)
		b = append(b, '{')
		for i, e := range chunk {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = strconv.AppendInt(b, e.ID, 10)
			b = append(b, '"', ':', '"')
			b = e.At.UTC().AppendFormat(b, sqliteTime)
			b = append(b, '"')
		}
		return mapErr(s.db.WithContext(ctx).Exec(`UPDATE machines SET last_seen = CASE
				WHEN last_seen IS NULL OR last_seen < j.value THEN j.value ELSE last_seen END
			FROM json_each(?) AS j WHERE machines.id = CAST(j.key AS INTEGER)`, string(append(b, '}'))).Error)
	})
}

// sqliteTime is how the SQLite driver writes a time (_time_format=sqlite).
const sqliteTime = "2006-01-02 15:04:05.999999999-07:00"

// CheckConflict judges, against the store and never a cache, whether a host
// that finished hostGen is ahead of its machine; if so it puts the machine
// in conflict (nothing is sent until an admin resolves it). It returns the
// verdict and the machine's generation in the store.
//
// finishedSend, when the host named it, is the send by which it received
// hostGen: a host at or behind the store's generation by a send this store
// never made to it at that generation finished another timeline's
// declaration (a store restored from a backup reused the number for other
// content, or moved past it on the backup's timeline), and is in conflict
// as a host ahead is — a 304 would leave it on content the store does not
// hold, shown as current or behind, for good, and a newer generation would
// be applied in full over what the lost timeline gave it. Once an admin
// resolved a conflict at hostGen or later, the store's content was chosen.
func (s *Store) CheckConflict(ctx context.Context, machineID int64, hostGen int64, finishedSend string) (conflict bool, gen int64, err error) {
	err = s.write(ctx, func(tx *Tx) error {
		var m models.Machine
		q := tx.DB
		if s.dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		if err := q.Where("id = ?", machineID).First(&m).Error; err != nil {
			return err
		}
		gen = m.Generation
		why := fmt.Sprintf("host finished generation %d, the store holds %d", hostGen, m.Generation)
		switch {
		case hostGen <= m.Generation && finishedSend == "":
			conflict = m.Conflict
			return nil
		case hostGen <= m.Generation:
			made, err := sendMade(tx.DB, finishedSend, machineID, hostGen)
			if err != nil || made {
				conflict = m.Conflict
				return err
			}
			if !m.Conflict && hostGen <= m.ConflictHostGen {
				// A conflict an admin resolved for this host's generation:
				// the store's content was chosen over what the host has.
				return nil
			}
			// Not on record says one of two things, and no clock tells
			// which: a send made on a timeline the store lost, or one
			// retention removed (a host back on an old snapshot of its
			// own). Either way the host's content is not the store's to
			// vouch for: a conflict, its words naming both.
			why = fmt.Sprintf("host finished generation %d by send %s, which this store does not hold: made on a timeline the store lost "+
				"(a store restored from a backup, at generation %d), or older than the sends it keeps (--keep-sends: a host back on an old snapshot of its own)",
				hostGen, finishedSend, m.Generation)
		}
		conflict = true
		if m.Conflict && m.ConflictHostGen >= hostGen {
			return nil
		}
		if err := tx.Model(&m).Updates(map[string]any{"conflict": true, "conflict_host_generation": hostGen, "conflict_at": tx.s.Now().UTC()}).Error; err != nil {
			return err
		}
		return audit(tx, "host:"+m.Name, "conflict", "machine/"+m.Name, why)
	})
	return conflict, gen, err
}

// SendMade says whether send is a send this store made to machine
// machineID at generation gen (a read: a poll's finished send, judged
// once per instance and generation).
func (s *Store) SendMade(ctx context.Context, send string, machineID, gen int64) (bool, error) {
	return sendMade(s.db.WithContext(ctx), send, machineID, gen)
}

func sendMade(db *gorm.DB, send string, machineID, gen int64) (bool, error) {
	var n int64
	err := db.Raw("SELECT COUNT(*) FROM sends WHERE id = ? AND machine_id = ? AND generation = ?", send, machineID, gen).Scan(&n).Error
	return n > 0, err
}

// Resolve ends a conflict: the generation moves past the host's and the
// declaration is composed from the store as it is now.
func (s *Store) Resolve(ctx context.Context, actor, name string) (*models.Machine, error) {
	var out *models.Machine
	err := s.write(ctx, func(tx *Tx) error {
		m, err := lockMachine(tx, name)
		if err != nil {
			return err
		}
		if !m.Conflict {
			return fmt.Errorf("%w: machine %s is not in conflict", models.ErrConflict, name)
		}
		hostGen := m.ConflictHostGen
		gen := max(m.Generation, hostGen)
		up := map[string]any{"conflict": false, "generation": gen}
		said := fmt.Sprintf("generation %d past the host's %d", gen+1, hostGen)
		if hostGen > models.MaxGeneration {
			// Moved past it, the store would have no room to count. The
			// conflict is cleared, not resolved past the host: a host that
			// still says it is in conflict again at its next poll, and one
			// reset (its state file removed) is served.
			gen, up["generation"], up["conflict_host_generation"] = m.Generation, m.Generation, 0
			said = fmt.Sprintf("cleared at generation %d: the host's %d is past the furthest a store moves a machine (%d); "+
				"a host that still says it is in conflict again at its next poll: reset it (remove its state file)", gen+1, hostGen, models.MaxGeneration)
		}
		// conflict_host_generation otherwise stays: a host at or behind it
		// that names a send this store never made (a restore's lost
		// timeline) was resolved for, and is sent the store's content
		// (CheckConflict).
		if err := tx.Model(m).Updates(up).Error; err != nil {
			return err
		}
		if err := bumpGenerations(tx, []int64{m.ID}, models.TriggerResolve); err != nil {
			return err
		}
		if err := audit(tx, actor, "resolve", "machine/"+name, said); err != nil {
			return err
		}
		out, err = lockMachine(tx, name)
		return err
	})
	return out, err
}

// Variables reads a machine's variables.
func (s *Store) Variables(ctx context.Context, name string) (map[string]string, *models.Machine, error) {
	m, err := s.Machine(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	var vs []models.MachineVariable
	if err := s.db.WithContext(ctx).Where("machine_id = ?", m.ID).Find(&vs).Error; err != nil {
		return nil, nil, mapErr(err)
	}
	out := make(map[string]string, len(vs))
	for _, v := range vs {
		out[v.Key] = v.Value
	}
	return out, m, nil
}

// SetVariables replaces a machine's variables under If-Match.
func (s *Store) SetVariables(ctx context.Context, actor, name string, ifMatch *int64, vars map[string]string) (*models.Machine, error) {
	var out *models.Machine
	err := s.write(ctx, func(tx *Tx) error {
		m, err := lockMachine(tx, name)
		if err != nil {
			return err
		}
		if err := checkIfMatch(m, ifMatch); err != nil {
			return err
		}
		// What it holds already changes nothing: no generation (a send and
		// a full apply on the host) for a write of the same values. Push is
		// the way to send the same content again.
		var was []models.MachineVariable
		if err := tx.Where("machine_id = ?", m.ID).Find(&was).Error; err != nil {
			return err
		}
		if len(was) == len(vars) && !slices.ContainsFunc(was, func(v models.MachineVariable) bool {
			nv, ok := vars[v.Key]
			return !ok || nv != v.Value
		}) {
			out = m
			return nil
		}
		if err := tx.Where("machine_id = ?", m.ID).Delete(&models.MachineVariable{}).Error; err != nil {
			return err
		}
		for k, v := range vars {
			if err := tx.Create(&models.MachineVariable{MachineID: m.ID, Key: k, Value: v}).Error; err != nil {
				return err
			}
		}
		if err := bumpGenerations(tx, []int64{m.ID}, models.TriggerVariables); err != nil {
			return err
		}
		keys, _ := json.Marshal(sortedKeys(vars))
		if err := audit(tx, actor, "set-variables", "machine/"+name, "keys "+string(keys)); err != nil {
			return err
		}
		out, err = lockMachine(tx, name)
		return err
	})
	return out, err
}

// Push makes a new generation with the same content.
func (s *Store) Push(ctx context.Context, actor, name string, ifMatch *int64) (*models.Machine, error) {
	var out *models.Machine
	err := s.write(ctx, func(tx *Tx) error {
		m, err := lockMachine(tx, name)
		if err != nil {
			return err
		}
		if err := checkIfMatch(m, ifMatch); err != nil {
			return err
		}
		if m.RevokedAt != nil {
			// A push is a send again, and nothing is sent to a revoked
			// machine: a new generation would say it was pushed.
			return fmt.Errorf("%w: machine %s is revoked (%s): nothing is sent to it; enrol it again to push", models.ErrConflict, name, m.RevokedReason)
		}
		if err := bumpGenerations(tx, []int64{m.ID}, models.TriggerPush); err != nil {
			return err
		}
		if err := audit(tx, actor, "push", "machine/"+name, fmt.Sprintf("generation %d", m.Generation+1)); err != nil {
			return err
		}
		out, err = lockMachine(tx, name)
		return err
	})
	return out, err
}

// withdrawnDeleted is why a plan step or rollout place of a machine
// deleted is withdrawn.
const withdrawnDeleted = "deleted: the machine is gone"

// deletedOrName is the SQL for the name of the machine of a row of table
// (plan_steps, rollout_machines) joined LEFT to machines: its name, or the
// one kept when it was deleted, said so.
func deletedOrName(table string) string {
	return "CASE WHEN machines.id IS NULL THEN " + table + ".machine_name || ' (deleted)' ELSE machines.name END"
}

// DeleteMachine removes a machine and everything recorded of it but its
// place in the plans and rollouts that reached it.
func (s *Store) DeleteMachine(ctx context.Context, actor, name string) error {
	return s.write(ctx, func(tx *Tx) error {
		m, err := lockMachine(tx, name)
		if err != nil {
			return err
		}
		// Its steps in plans and its places in host rollouts stay, under
		// its name: they are the plans' and rollouts' record. Those still
		// to come end here, withdrawn: nothing will be sent to it, and a
		// step said "sent" or "upgrading" for good was waited on (a paused
		// plan's look at it stopped every plan's stepping).
		const why = withdrawnDeleted
		now := s.Now()
		for _, t := range []any{&models.PlanStep{}, &models.RolloutMachine{}} {
			if err := tx.Model(t).Where("machine_id = ?", m.ID).Update("machine_name", m.Name).Error; err != nil {
				return err
			}
		}
		if err := tx.Model(&models.PlanStep{}).Where("machine_id = ? AND state IN ?", m.ID, []string{models.StepPending, models.StepSent}).
			Updates(map[string]any{"state": models.StepWithdrawn, "reason": why, "finished_at": now}).Error; err != nil {
			return err
		}
		if err := tx.Model(&models.RolloutMachine{}).Where("machine_id = ? AND state IN ?", m.ID, []string{models.UpgradePending, models.UpgradeUpgrading}).
			Updates(map[string]any{"state": models.UpgradeWithdrawn, "reason": why, "finished_at": now}).Error; err != nil {
			return err
		}
		for _, t := range []any{&models.ReportRow{}, &models.Send{}, &models.Declaration{}, &models.Assignment{}, &models.MachineVariable{}, &models.MachineLabel{}} {
			if err := tx.Where("machine_id = ?", m.ID).Delete(t).Error; err != nil {
				return err
			}
		}
		if err := tx.Delete(m).Error; err != nil {
			return err
		}
		// The name's last generation outlives the machine: one enrolled
		// again under it starts past what its host finished (a host ahead
		// of the store in a conflict included).
		greatest := "GREATEST"
		if s.dialect == SQLite {
			greatest = "MAX"
		}
		if err := tx.Exec(`INSERT INTO machine_generations (name, generation) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET generation = `+greatest+`(machine_generations.generation, excluded.generation)`,
			name, min(max(m.Generation, m.ConflictHostGen), models.MaxGeneration)).Error; err != nil {
			return err
		}
		// Its token and certificates are refused on every instance at once,
		// whatever the instance still remembers of it.
		if err := revokeEnrolment(tx, actor, m, "machine "+name+" deleted"); err != nil {
			return err
		}
		return audit(tx, actor, "delete-machine", "machine/"+name, "")
	})
}

// RecordComposeErrors records why machines' generations could not be
// composed, on each machine (the overview shows it) and in the audit log,
// in one transaction.
func (s *Store) RecordComposeErrors(ctx context.Context, actor string, fs []models.ComposeFailure) error {
	if len(fs) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *Tx) error {
		for _, f := range fs {
			if err := tx.Model(&models.Machine{}).Where("id = ? AND compose_error_generation <= ?", f.MachineID, f.Generation).
				Updates(map[string]any{"compose_error": f.Reason, "compose_error_generation": f.Generation}).Error; err != nil {
				return err
			}
			if err := audit(tx, actor, "compose-failed", "machine/"+f.Machine, fmt.Sprintf("generation %d: %s", f.Generation, f.Reason)); err != nil {
				return err
			}
		}
		return nil
	})
}
