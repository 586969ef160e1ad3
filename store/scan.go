package store

import (
	"cmp"
	"context"
	"database/sql"
	"math"
	"slices"
	"strconv"
	"time"

	"gorm.io/gorm"

	"mesh/models"
)

// The reads below are on the fan-out's path: every machine of a change is
// read once per compose batch. gorm's Find scans each row by reflection
// over the model's whole schema, which was about half of the snapshot read
// on SQLite; these scan the few columns composing needs straight into the
// fields. They read inside the caller's transaction (the snapshot), like
// the Find they replace.

// each runs query in db and calls scan for every row.
func each(db *gorm.DB, scan func(*sql.Rows) error, query string, args ...any) error {
	rows, err := db.Raw(query, args...).Rows()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// idsAsList spells an id list out as one parameter a value ("IN ?"),
// gorm's way; false (the default) passes it as one parameter (inID).
// Only the benchmark of the snapshot read sets it, to compare the two.
var idsAsList = false

// inID is "column IN (the ids)" with the ids as one parameter: a JSON
// array read by json_each on SQLite, an array on PostgreSQL. A list of
// 500 parameters costs the SQLite driver a quadratic search to bind
// (each parameter looked up among all of them) and both engines a
// statement of 500 placeholders to parse on every chunk.
func inID(tx *Tx, column string, ids []int64) (string, any) {
	if idsAsList {
		return column + " IN ?", ids
	}
	if tx.s.dialect == Postgres {
		return column + " = ANY(CAST(? AS bigint[]))", int64Array(ids, '{', '}')
	}
	return column + " IN (SELECT value FROM json_each(?))", int64Array(ids, '[', ']')
}

// int64Array spells ids out between open and shut, comma-separated: a
// JSON array ('[', ']') or a PostgreSQL array literal ('{', '}').
func int64Array(ids []int64, open, shut byte) string {
	b := make([]byte, 0, len(ids)*8+2)
	b = append(b, open)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, shut))
}

// composeMachines reads the machines ids names, in id order, with the
// columns composing needs.
func composeMachines(tx *Tx, ids []int64) ([]models.Machine, error) {
	ms := make([]models.Machine, 0, len(ids))
	in, arg := inID(tx, "id", ids)
	err := each(tx.DB, func(r *sql.Rows) error {
		var m models.Machine
		if err := r.Scan(&m.ID, &m.Name, &m.OS, &m.Arch, &m.Generation, &m.GenerationTrigger, &m.EmptyOK,
			&m.TargetHostVersion, &m.Running, &m.Conflict, &m.HostVersion, &m.Schema, &m.AppliedGeneration,
			&m.HeldBack); err != nil {
			return err
		}
		ms = append(ms, m)
		return nil
	}, `SELECT id, name, os, arch, generation, generation_trigger, empty_ok, target_host_version, running,
		conflict, host_version, schema, applied_generation, held_back FROM machines WHERE `+in+` ORDER BY id`, arg)
	return ms, err
}

// composeVariables reads the variables of the machines ids, per machine.
func composeVariables(tx *Tx, ids []int64) (map[int64]map[string]string, error) {
	out := make(map[int64]map[string]string, len(ids))
	in, arg := inID(tx, "machine_id", ids)
	err := each(tx.DB, func(r *sql.Rows) error {
		var id int64
		var k, v string
		if err := r.Scan(&id, &k, &v); err != nil {
			return err
		}
		if out[id] == nil {
			out[id] = map[string]string{}
		}
		out[id][k] = v
		return nil
	}, `SELECT machine_id, key, value FROM machine_variables WHERE `+in, arg)
	return out, err
}

// composeAssignments reads the assignments of the machines ids with the
// columns composing needs.
func composeAssignments(tx *Tx, ids []int64) ([]models.Assignment, error) {
	var as []models.Assignment
	in, arg := inID(tx, "machine_id", ids)
	err := each(tx.DB, func(r *sql.Rows) error {
		var a models.Assignment
		var build sql.NullInt64
		if err := r.Scan(&a.MachineID, &a.ModuleID, &build, &a.Reason, &a.PinPlan, &a.Assigned, &a.Selected); err != nil {
			return err
		}
		if build.Valid {
			a.Build = &build.Int64
		}
		as = append(as, a)
		return nil
	}, `SELECT machine_id, module_id, build, reason, pin_plan, assigned, selected FROM assignments WHERE `+in, arg)
	return as, err
}

// MachineStates reads every machine in name order with its id, its name
// and only the columns its state is judged from (models.StateRules.State):
// the overview counts the whole fleet by state on every refresh, and at
// 100,000 machines reading every column through gorm took seconds.
func (s *Store) MachineStates(ctx context.Context) ([]models.Machine, error) {
	ms, err := machineStates(s.db.WithContext(ctx))
	return ms, mapErr(err)
}

func machineStates(db *gorm.DB) ([]models.Machine, error) {
	var ms []models.Machine
	err := each(db, func(r *sql.Rows) error {
		return scanState(r, &ms)
	}, `SELECT `+stateColumns+` FROM machines ORDER BY name`)
	return ms, err
}

// Overview reads, in one snapshot of the store, every machine with the
// columns MachineStates reads, the machines pick chooses among them whole
// (machinesByID), and what was sent of the current generation of those
// (currentSends). Read one after another, a machine that changed between
// the reads was counted under one state and shown under another: a row
// saying behind under the filter current.
func (s *Store) Overview(ctx context.Context, pick func(all []models.Machine) []int64) (all, shown []models.Machine, sent map[int64]models.PendingSend, err error) {
	err = s.snapshot(ctx, func(tx *Tx) error {
		var err error
		if all, err = machineStates(tx.DB); err != nil {
			return err
		}
		if shown, err = machinesByID(tx.DB, pick(all)); err != nil {
			return err
		}
		sent, err = currentSends(tx.DB, shown)
		return err
	})
	return all, shown, sent, err
}

// MachinesInState reads, in one snapshot of the store, up to n machines
// that keep says are in state, newest first from ids below before (0: from
// the newest), judging the candidates MachineStatesBefore narrows to a
// batch at a time; the chosen machines whole (machinesByID, newest first);
// and what was sent of their current generation (currentSends). more says
// whether another such machine follows them. Judged in one read and read
// whole in another, a machine that changed between them was listed under
// a state its own view did not say.
func (s *Store) MachinesInState(ctx context.Context, state string, rules models.StateRules, now time.Time, before int64, n, batch int,
	keep func(*models.Machine) bool) (ms []models.Machine, more bool, sent map[int64]models.PendingSend, err error) {
	err = s.snapshot(ctx, func(tx *Tx) error {
		var ids []int64 // one more than n when there is a next
		for cur := before; len(ids) <= n; {
			got, err := machineStatesBefore(tx.DB, state, rules, now, cur, batch)
			if err != nil {
				return err
			}
			for i := range got {
				if keep(&got[i]) {
					if ids = append(ids, got[i].ID); len(ids) > n {
						break
					}
				}
			}
			if len(got) < batch {
				break
			}
			cur = got[len(got)-1].ID
		}
		if more = len(ids) > n; more {
			ids = ids[:n]
		}
		var err error
		if ms, err = machinesByID(tx.DB, ids); err != nil {
			return err
		}
		slices.SortFunc(ms, func(a, b models.Machine) int { return cmp.Compare(b.ID, a.ID) })
		sent, err = currentSends(tx.DB, ms)
		return err
	})
	return ms, more, sent, err
}

// MachineStatesBefore reads, newest first, at most n machines with ids
// below before (0: from the newest) that may be in state at now by rules,
// with the columns MachineStates reads. It narrows, the caller judges:
// every machine in state is among them (stateCandidates), not every one
// of them is in it. A page of one state is then read a batch at a time
// until it is full, rather than judging the whole fleet for every page
// (at 100,000 machines, 0.6–0.9 s a page).
func (s *Store) MachineStatesBefore(ctx context.Context, state string, rules models.StateRules, now time.Time, before int64, n int) ([]models.Machine, error) {
	ms, err := machineStatesBefore(s.db.WithContext(ctx), state, rules, now, before, n)
	return ms, mapErr(err)
}

func machineStatesBefore(db *gorm.DB, state string, rules models.StateRules, now time.Time, before int64, n int) ([]models.Machine, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	args := []any{before}
	where := ""
	if c, ok := stateCandidates[state]; ok {
		where = " AND " + c
		if state == models.StateOffline { // its condition's one parameter
			args = append(args, now.UTC().Add(-rules.OfflineAfter))
		}
	}
	args = append(args, n)
	ms := make([]models.Machine, 0, n)
	err := each(db, func(r *sql.Rows) error {
		return scanState(r, &ms)
	}, `SELECT `+stateColumns+` FROM machines WHERE id < ?`+where+` ORDER BY id DESC LIMIT ?`, args...)
	return ms, err
}

// stateCandidates is, for a state, a condition every machine the rules
// put in it meets: that state's own test in models.StateRules.State and,
// for current, the negation of the tests before it but two — offline's
// (the instance a host polls may have heard it since the store did) and
// unhealthy's (it reads the clock). Offline's own takes the time at or
// before which a host last heard from, or a machine never heard from
// enrolled, is offline: the store's word is never later than the one a
// state is judged by (models.LastSeen), and no host is heard from before
// its enrolment, so it keeps every offline machine ("at or": PostgreSQL's
// driver sends the cutoff cut to the microsecond, the rules compare it
// whole).
var stateCandidates = map[string]string{
	models.StateConflict:   "conflict",
	models.StateRevoked:    "revoked_at IS NOT NULL",
	models.StateOffline:    "COALESCE(last_seen, created_at) <= ?",
	models.StateRolledBack: "last_outcome = '" + models.OutcomeRolledBack + "'",
	models.StateUpgrading:  "target_host_version <> '' AND host_version <> target_host_version",
	models.StateFailed:     "(generation > finished_generation OR last_outcome_generation >= generation) AND last_outcome = '" + models.OutcomeFailed + "'",
	models.StateBehind:     "(generation > finished_generation OR held_back <> '')",
	models.StateRefused:    "last_outcome = '" + models.OutcomeRefused + "'",
	models.StateRejected:   "last_outcome = '" + models.OutcomeRejected + "'",
	models.StateUnhealthy:  "health = '" + models.HealthFailing + "'",
	models.StateCurrent: "NOT conflict AND revoked_at IS NULL" +
		" AND last_outcome NOT IN ('" + models.OutcomeRolledBack + "', '" + models.OutcomeRefused + "', '" + models.OutcomeRejected + "')" +
		" AND (target_host_version = '' OR host_version = target_host_version)" +
		" AND generation <= finished_generation AND held_back = ''" +
		" AND (last_outcome <> '" + models.OutcomeFailed + "' OR last_outcome_generation < generation)",
}

// stateColumns are the columns a machine's state is judged from, with its
// id and name, as scanState reads them.
const stateColumns = `id, name, conflict, created_at, finished_generation, generation, health, health_check,
	health_since, held_back, host_version, last_outcome, last_outcome_generation, revoked_at, target_host_version, last_seen`

// scanState appends the row of stateColumns r is at to ms.
func scanState(r *sql.Rows, ms *[]models.Machine) error {
	var m models.Machine
	if err := r.Scan(&m.ID, &m.Name, &m.Conflict, &m.CreatedAt, &m.FinishedGen, &m.Generation, &m.Health,
		&m.HealthCheck, &m.HealthSince, &m.HeldBack, &m.HostVersion, &m.LastOutcome, &m.LastOutcomeGen, &m.RevokedAt,
		&m.TargetHostVersion, &m.LastSeen); err != nil {
		return err
	}
	*ms = append(*ms, m)
	return nil
}

// machinesByID reads the machines ids names, whole, in name order (a
// machine deleted meanwhile is not there).
func machinesByID(db *gorm.DB, ids []int64) ([]models.Machine, error) {
	var ms []models.Machine
	if len(ids) == 0 {
		return ms, nil
	}
	return ms, db.Where("id IN ?", ids).Order("name").Find(&ms).Error
}
