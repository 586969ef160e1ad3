package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"mesh/models"
)

// errDryRun rolls back a transaction that only previewed its change.
var errDryRun = errors.New("dry run: rolled back")

// dryRun runs fn in a write transaction and rolls it back when preview is
// true, keeping what fn returned: a preview goes through exactly the path
// of the change it previews, and changes nothing.
func dryRun[T any](ctx context.Context, s *Store, preview bool, fn func(tx *Tx) (T, error)) (T, error) {
	var out T
	err := s.write(ctx, func(tx *Tx) error {
		var err error
		if out, err = fn(tx); err != nil {
			return err
		}
		if preview {
			tx.bumps, tx.revoked = nil, nil
			return errDryRun
		}
		return nil
	})
	if preview && errors.Is(err, errDryRun) {
		err = nil
	}
	return out, err
}

// selectionLockKey names the advisory lock that label and selector writes
// take on PostgreSQL (an arbitrary constant: "mesh-sel").
const selectionLockKey = 0x6d6573682d73656c

// lockSelection serialises the writes that judge machines against
// selectors: a label write reads every selector and a selector change
// every machine's labels, so two at once (read committed) could each miss
// the other's change and leave a machine without a module both say it
// should have. They are rare operator acts; one waits for the other. On
// SQLite writes are one at a time already.
func lockSelection(tx *Tx) error {
	if tx.s.dialect != Postgres {
		return nil
	}
	return tx.Exec("SELECT pg_advisory_xact_lock(?)", int64(selectionLockKey)).Error
}

// machineLabels reads the labels of machines by id.
func machineLabels(tx *Tx, ids []int64) (map[int64]map[string]string, error) {
	out := map[int64]map[string]string{}
	err := inChunks(ids, 1000, func(chunk []int64) error {
		var ls []models.MachineLabel
		if err := tx.Where("machine_id IN ?", chunk).Find(&ls).Error; err != nil {
			return err
		}
		for _, l := range ls {
			if out[l.MachineID] == nil {
				out[l.MachineID] = map[string]string{}
			}
			out[l.MachineID][l.Key] = l.Value
		}
		return nil
	})
	return out, err
}

// reselect judges machines against the selectors of mods (models.Reselect)
// and brings their assignment rows in line: a row made for a module newly
// selected, dropped for one no longer selected that no person assigned, its
// selected flag set either way. The changes are returned in machine order,
// with the ids of the machines that gain or lose a module: the caller bumps
// them (trigger label) in the same transaction. Composing reads the rows,
// so it stays from the store.
func reselect(tx *Tx, machines []models.Machine, mods []models.Module) ([]models.SelectionChange, []int64, error) {
	if len(machines) == 0 || len(mods) == 0 {
		return nil, nil, nil
	}
	selectors := map[string]models.Selector{}
	byName := map[string]models.Module{}
	modIDs := make([]int64, 0, len(mods))
	for _, m := range mods {
		sel, err := models.ParseSelector(m.Selector)
		if err != nil {
			return nil, nil, fmt.Errorf("module %s: %w", m.Name, err)
		}
		selectors[m.Name], byName[m.Name] = sel, m
		modIDs = append(modIDs, m.ID)
	}
	ids := make([]int64, len(machines))
	for i, m := range machines {
		ids[i] = m.ID
	}
	labels, err := machineLabels(tx, ids)
	if err != nil {
		return nil, nil, err
	}
	rows := map[int64]map[string]models.SelectedRow{}
	modName := map[int64]string{}
	for _, m := range mods {
		modName[m.ID] = m.Name
	}
	if err := inChunks(ids, 1000, func(chunk []int64) error {
		var as []models.Assignment
		if err := tx.Where("machine_id IN ? AND module_id IN ?", chunk, modIDs).Find(&as).Error; err != nil {
			return err
		}
		for _, a := range as {
			if rows[a.MachineID] == nil {
				rows[a.MachineID] = map[string]models.SelectedRow{}
			}
			rows[a.MachineID][modName[a.ModuleID]] = models.SelectedRow{Assigned: a.Assigned, Selected: a.Selected}
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	var changes []models.SelectionChange
	var bumped []int64
	now := tx.s.Now()
	for _, m := range machines {
		selected, gains, loses := models.Reselect(labels[m.ID], selectors, rows[m.ID])
		for name, on := range selected {
			row, had := rows[m.ID][name]
			mod := byName[name]
			switch {
			case on && !had:
				a := models.Assignment{MachineID: m.ID, ModuleID: mod.ID, Selected: true, CreatedAt: now}
				if err := tx.Create(&a).Error; err != nil {
					return nil, nil, err
				}
			case !on && had && row.Selected && !row.Assigned:
				if err := tx.Where("machine_id = ? AND module_id = ?", m.ID, mod.ID).Delete(&models.Assignment{}).Error; err != nil {
					return nil, nil, err
				}
			case had && row.Selected != on:
				if err := tx.Model(&models.Assignment{}).Where("machine_id = ? AND module_id = ?", m.ID, mod.ID).
					Update("selected", on).Error; err != nil {
					return nil, nil, err
				}
			}
		}
		if len(gains)+len(loses) > 0 {
			changes = append(changes, models.SelectionChange{Machine: m.Name, Gains: nonNil(gains), Loses: nonNil(loses)})
			bumped = append(bumped, m.ID)
			if err := markEmptied(tx, m.ID, len(loses) > 0); err != nil {
				return nil, nil, err
			}
		}
	}
	return changes, bumped, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// selectingModules are the modules with a selector.
func selectingModules(tx *Tx) ([]models.Module, error) {
	var ms []models.Module
	return ms, tx.Where("selector <> ''").Order("name").Find(&ms).Error
}

// Labels reads a machine's labels.
func (s *Store) Labels(ctx context.Context, name string) (map[string]string, *models.Machine, error) {
	m, err := s.Machine(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	var ls []models.MachineLabel
	if err := s.db.WithContext(ctx).Where("machine_id = ?", m.ID).Find(&ls).Error; err != nil {
		return nil, nil, mapErr(err)
	}
	out := map[string]string{}
	for _, l := range ls {
		out[l.Key] = l.Value
	}
	return out, m, nil
}

// SetLabels replaces a machine's labels under If-Match, audited: the
// machine gains the modules whose selectors now match and loses those
// that no longer do (unless a person assigned them), with a new
// generation (trigger label) in the same transaction. preview answers
// the same and changes nothing.
func (s *Store) SetLabels(ctx context.Context, actor, name string, ifMatch *int64, labels map[string]string, preview bool) (*models.LabelChange, error) {
	return dryRun(ctx, s, preview, func(tx *Tx) (*models.LabelChange, error) {
		if err := lockSelection(tx); err != nil {
			return nil, err
		}
		m, err := lockMachine(tx, name)
		if err != nil {
			return nil, err
		}
		if err := checkIfMatch(m, ifMatch); err != nil {
			return nil, err
		}
		// The labels it has already: nothing changes, no generation.
		was, err := machineLabels(tx, []int64{m.ID})
		if err != nil {
			return nil, err
		}
		if maps.Equal(was[m.ID], labels) || len(was[m.ID]) == 0 && len(labels) == 0 {
			return &models.LabelChange{Machine: m, Changes: []models.SelectionChange{}}, nil
		}
		if err := setLabels(tx, m.ID, labels); err != nil {
			return nil, err
		}
		mods, err := selectingModules(tx)
		if err != nil {
			return nil, err
		}
		changes, _, err := reselect(tx, []models.Machine{*m}, mods)
		if err != nil {
			return nil, err
		}
		// Labels are desired state too (If-Match guards them by the
		// generation), so a write without a module change bumps as well.
		if err := bumpGenerations(tx, []int64{m.ID}, models.TriggerLabel); err != nil {
			return nil, err
		}
		if err := audit(tx, actor, "set-labels", "machine/"+name, describeLabels(labels, changes)); err != nil {
			return nil, err
		}
		out, err := lockMachine(tx, name)
		return &models.LabelChange{Machine: out, Changes: nonNilChanges(changes)}, err
	})
}

func nonNilChanges(cs []models.SelectionChange) []models.SelectionChange {
	if cs == nil {
		return []models.SelectionChange{}
	}
	return cs
}

// setLabels replaces a machine's label rows.
func setLabels(tx *Tx, machineID int64, labels map[string]string) error {
	if err := tx.Where("machine_id = ?", machineID).Delete(&models.MachineLabel{}).Error; err != nil {
		return err
	}
	if len(labels) == 0 {
		return nil
	}
	rows := make([]models.MachineLabel, 0, len(labels))
	for _, k := range models.SortedLabelKeys(labels) {
		rows = append(rows, models.MachineLabel{MachineID: machineID, Key: k, Value: labels[k]})
	}
	return tx.Create(&rows).Error
}

// labelsAtEnrol gives a machine enrolling the labels its join token
// carries, and the modules they select; the enrolment's own bump (trigger
// enrol) carries them. A machine enrolling without labels is judged too:
// a selector such as `!gpu` holds for it.
func labelsAtEnrol(tx *Tx, m *models.Machine, jt *models.JoinToken) error {
	labels, err := models.ParseLabelsJSON(jt.Labels)
	if err != nil {
		return err
	}
	if err := lockSelection(tx); err != nil {
		return err
	}
	if err := setLabels(tx, m.ID, labels); err != nil {
		return err
	}
	mods, err := selectingModules(tx)
	if err != nil {
		return err
	}
	_, _, err = reselect(tx, []models.Machine{*m}, mods)
	return err
}

func describeLabels(labels map[string]string, changes []models.SelectionChange) string {
	var b strings.Builder
	for i, k := range models.SortedLabelKeys(labels) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + labels[k])
	}
	for _, c := range changes {
		if len(c.Gains) > 0 {
			b.WriteString("; gains " + strings.Join(c.Gains, ","))
		}
		if len(c.Loses) > 0 {
			b.WriteString("; loses " + strings.Join(c.Loses, ","))
		}
	}
	return b.String()
}

// replaceAssigned replaces what a person assigned to a machine by rows,
// keeping the rows a selector made: a module selected and no longer
// assigned stays, as selected only (a person's pin on it goes; a plan
// rollback's stays). It returns how many selected-only rows remain.
func replaceAssigned(tx *Tx, machineID int64, rows []models.Assignment) (int, error) {
	var selected []models.Assignment
	if err := tx.Where("machine_id = ? AND selected", machineID).Find(&selected).Error; err != nil {
		return 0, err
	}
	if err := tx.Where("machine_id = ?", machineID).Delete(&models.Assignment{}).Error; err != nil {
		return 0, err
	}
	listed := map[int64]bool{}
	for i := range rows {
		listed[rows[i].ModuleID] = true
	}
	kept := 0
	for _, a := range selected {
		if listed[a.ModuleID] {
			continue
		}
		a.Assigned = false
		if a.PinPlan == 0 {
			a.Build, a.Reason = nil, ""
		}
		rows = append(rows, a)
		kept++
	}
	isSelected := map[int64]bool{}
	for _, a := range selected {
		isSelected[a.ModuleID] = true
	}
	for i := range rows {
		rows[i].Selected = isSelected[rows[i].ModuleID]
	}
	if len(rows) == 0 {
		return 0, nil
	}
	return kept, tx.Create(&rows).Error
}

// markEmptied says whether a machine whose modules a person's label or
// selector change just moved is empty on purpose: a host refuses an empty
// declaration otherwise (a lost store must never tear a machine down), and
// a label change is as deliberate as emptying its assignments.
func markEmptied(tx *Tx, machineID int64, lost bool) error {
	n, err := contributing(tx, machineID)
	if err != nil {
		return err
	}
	switch {
	case n == 0 && lost:
		return tx.Model(&models.Machine{}).Where("id = ?", machineID).Update("empty_ok", true).Error
	case n > 0:
		return tx.Model(&models.Machine{}).Where("id = ?", machineID).Update("empty_ok", false).Error
	}
	// Only gains that give nothing (a module with no build): the machine
	// is as empty as it was, on purpose or not (cleared, a person's
	// emptying was refused by its host while the last services ran on).
	return nil
}

// contributing counts the machine's modules that give its declaration a
// build (a current build, or a pin): a module a selector keeps on it with
// no build yet gives nothing, and a machine left with only such modules
// is empty, as its declaration is.
func contributing(tx *Tx, machineID int64) (int64, error) {
	var n int64
	err := tx.Table("assignments").Joins("JOIN modules ON modules.id = assignments.module_id").
		Where("assignments.machine_id = ? AND (assignments.build IS NOT NULL OR modules.current_build IS NOT NULL)", machineID).Count(&n).Error
	return n, err
}
