package store

import (
	"context"
	"database/sql/driver"
	"fmt"
	"time"

	"mesh/models"
)

// Fleet reads, in one snapshot, what the fleet's metrics are computed
// from: every machine's state columns (stateColumns, the overview's and
// the state pages' own, so a column the rules come to read reaches the
// metrics too), plans and rollouts counted by state, and the tiers of the
// plans with an id above afterPlan (the caller keeps what it has folded
// from older plans that can change no more, so this read does not grow
// with the history of plans). Three statements, none of them per machine.
func (s *Store) Fleet(ctx context.Context, afterPlan int64) (*models.Fleet, error) {
	f := &models.Fleet{Plans: map[string]int64{}, Rollouts: map[string]int64{}}
	err := s.snapshot(ctx, func(tx *Tx) error {
		if err := tx.Select(stateColumns + ", compose_error_generation").Order("id").Find(&f.Machines).Error; err != nil {
			return err
		}
		var counts []struct {
			Kind  string
			State string
			N     int64
		}
		if err := tx.Raw(`SELECT 'plan' AS kind, state, COUNT(*) AS n FROM plans GROUP BY state
			UNION ALL SELECT 'rollout' AS kind, state, COUNT(*) AS n FROM rollouts GROUP BY state`).Scan(&counts).Error; err != nil {
			return err
		}
		for _, c := range counts {
			if c.Kind == "plan" {
				f.Plans[c.State] += c.N
			} else {
				f.Rollouts[c.State] += c.N
			}
		}
		var mods []models.Module
		if err := tx.Select("id", "name").Find(&mods).Error; err != nil {
			return err
		}
		f.Modules = make(map[string]int64, len(mods))
		for _, m := range mods {
			f.Modules[m.Name] = m.ID
		}
		var rows []struct {
			PlanID         int64
			ModuleID       int64
			Module         string
			PlanState      string
			PlanFinishedAt anyTime
			Tier           *int64
			Steps          int64
			Finished       int64
			Failed         int64
			Withdrawn      int64
			Started        anyTime
			Ended          anyTime
		}
		// A LEFT JOIN, so a plan with no steps is seen too (with its state).
		if err := tx.Raw(`SELECT plans.id AS plan_id, modules.id AS module_id, modules.name AS module, plans.state AS plan_state,
				plans.finished_at AS plan_finished_at, plan_steps.tier AS tier,
				COUNT(plan_steps.plan_id) AS steps, COUNT(plan_steps.finished_at) AS finished,
				COALESCE(SUM(CASE WHEN plan_steps.state = ? THEN 1 ELSE 0 END), 0) AS failed,
				COALESCE(SUM(CASE WHEN plan_steps.state = ? THEN 1 ELSE 0 END), 0) AS withdrawn,
				MIN(plan_steps.started_at) AS started, MAX(plan_steps.finished_at) AS ended
			FROM plans JOIN modules ON modules.id = plans.module_id
			LEFT JOIN plan_steps ON plan_steps.plan_id = plans.id
			WHERE plans.id > ?
			GROUP BY plans.id, modules.id, modules.name, plans.state, plans.finished_at, plan_steps.tier
			ORDER BY plans.id, plan_steps.tier`, models.StepFailed, models.StepWithdrawn, afterPlan).Scan(&rows).Error; err != nil {
			return err
		}
		for _, r := range rows {
			t := models.TierSpan{PlanID: r.PlanID, ModuleID: r.ModuleID, Module: r.Module, PlanState: r.PlanState, PlanFinishedAt: r.PlanFinishedAt.ptr(),
				Steps: r.Steps, Finished: r.Finished, Failed: r.Failed, Withdrawn: r.Withdrawn, Started: r.Started.ptr(), Ended: r.Ended.ptr()}
			if r.Tier != nil {
				t.Tier = *r.Tier
			}
			f.Tiers = append(f.Tiers, t)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// anyTime scans a time that SQLite may give as text: an aggregate (MIN,
// MAX) of a DATETIME column has no declared type there, so the driver
// hands back the stored string rather than a time.Time.
type anyTime struct {
	t  time.Time
	ok bool
}

func (a *anyTime) Scan(v any) error {
	var s string
	switch v := v.(type) {
	case nil:
		*a = anyTime{}
		return nil
	case time.Time:
		*a = anyTime{t: v, ok: true}
		return nil
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		return fmt.Errorf("a time from %T", v)
	}
	// The forms the SQLite driver stores a time in, and hand-written SQL's.
	for _, l := range []string{"2006-01-02 15:04:05.999999999-07:00", time.RFC3339Nano, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(l, s); err == nil {
			*a = anyTime{t: t, ok: true}
			return nil
		}
	}
	return fmt.Errorf("a time from %q", s)
}

// Value lets anyTime stand in a row struct gorm also knows how to write.
func (a anyTime) Value() (driver.Value, error) {
	if !a.ok {
		return nil, nil
	}
	return a.t, nil
}

func (a anyTime) ptr() *time.Time {
	if !a.ok {
		return nil
	}
	t := a.t.UTC()
	return &t
}
