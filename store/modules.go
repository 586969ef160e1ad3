package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"mesh/models"
)

// CreateModule adds a module.
func (s *Store) CreateModule(ctx context.Context, actor string, m *models.Module) error {
	return s.write(ctx, func(tx *Tx) error {
		m.CreatedAt = s.Now()
		if err := tx.Create(m).Error; err != nil {
			if errors.Is(err, gorm.ErrDuplicatedKey) {
				return fmt.Errorf("%w: module %s already exists", models.ErrConflict, m.Name)
			}
			return err
		}
		return audit(tx, actor, "create-module", "module/"+m.Name, "kind "+m.Kind)
	})
}

// Module reads one module by name.
func (s *Store) Module(ctx context.Context, name string) (*models.Module, error) {
	var m models.Module
	if err := s.db.WithContext(ctx).Where("name = ?", name).First(&m).Error; err != nil {
		return nil, fmt.Errorf("module %s: %w", name, mapErr(err))
	}
	return &m, nil
}

// Modules lists modules newest first.
func (s *Store) Modules(ctx context.Context, limit int, cursor int64) ([]models.Module, error) {
	var ms []models.Module
	q := s.db.WithContext(ctx).Order("id DESC").Limit(limit)
	if cursor > 0 {
		q = q.Where("id < ?", cursor)
	}
	return ms, mapErr(q.Find(&ms).Error)
}

// CreateBuild adds a build with the next number of its module. The artifact
// blob, when there is one, was stored first (PutBlob); the build names it.
// A module's first build becomes current; later ones only through a plan
// or a person.
func (s *Store) CreateBuild(ctx context.Context, actor, module string, b *models.Build, artifact *models.Blob) error {
	_, err := Write(ctx, s, func(tx *Tx) (*models.Module, error) { return tx.CreateBuild(actor, module, b, artifact) })
	return err
}

// CreateBuild is Store.CreateBuild inside tx; it returns the module as it
// stood before the build (its current build unchanged by this one).
func (tx *Tx) CreateBuild(actor, module string, b *models.Build, artifact *models.Blob) (*models.Module, error) {
	mod, err := lockModuleForBuild(tx, module)
	if err != nil {
		return nil, err
	}
	return tx.createBuild(actor, mod, b, artifact)
}

// UploadBuild is CreateBuild for an upload that may be a retry: when the
// module's newest finished build holds the same version, commit, manifest
// and artifact as b, nothing is made and that build is returned as same (a
// CI job whose answer was lost sends its upload again, and one build must
// not become two, nor start a second plan); builds a merge queued since
// are not finished and do not count. When that build was yanked the
// upload is refused: its bytes are never rolled out again, under any
// number. A mesh-host module's uploads are never taken as retries: the
// same binary may be another platform's release (a release's version and
// platform are unique, so a retry of one is refused there). The module's
// row is locked first, so two copies of one upload at once make one build.
func (tx *Tx) UploadBuild(actor, module string, b *models.Build, artifact *models.Blob) (mod *models.Module, same *models.Build, err error) {
	m, err := lockModuleForBuild(tx, module)
	if err != nil {
		return nil, nil, err
	}
	if m.Kind != models.KindHost {
		var newest models.Build
		err = tx.Where("module_id = ? AND state IN ?", m.ID, finishedBuild).
			Order("number DESC").Limit(1).Take(&newest).Error
		if err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
			return nil, nil, err
		}
		if err == nil && newest.Version == b.Version && newest.Commit == b.Commit && newest.Digest == b.Digest && newest.Manifest == b.Manifest {
			if newest.State == models.BuildYanked {
				return nil, nil, fmt.Errorf("%w: build %d of %s holds this upload and was yanked (%s): a yanked build's content is never rolled out again; "+
					"upload a fixed one", models.ErrConflict, newest.Number, module, newest.YankReason)
			}
			return m, &newest, nil
		}
	}
	mod, err = tx.createBuild(actor, m, b, artifact)
	return mod, nil, err
}

// finishedBuild are the states of a build that was finished: usable
// (ready; "" in rows older than states) or yanked since. A build a merge
// queued and no builder finished yet is none of them.
var finishedBuild = []string{models.BuildReady, "", models.BuildYanked}

// lockModuleForBuild reads the module a build is added to, locked on
// PostgreSQL: that serialises a module's build numbers across replicas.
func lockModuleForBuild(tx *Tx, module string) (*models.Module, error) {
	var mod models.Module
	q := tx.DB
	if tx.s.dialect == Postgres {
		q = q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	if err := q.Where("name = ?", module).First(&mod).Error; err != nil {
		return nil, fmt.Errorf("module %s: %w", module, mapErr(err))
	}
	return &mod, nil
}

func (tx *Tx) createBuild(actor string, m *models.Module, b *models.Build, artifact *models.Blob) (*models.Module, error) {
	mod, module := *m, m.Name
	var last struct{ N *int64 }
	if err := tx.Model(&models.Build{}).Select("MAX(number) AS n").Where("module_id = ?", mod.ID).Scan(&last).Error; err != nil {
		return nil, err
	}
	b.ModuleID = mod.ID
	b.Number = 1
	if last.N != nil {
		b.Number = *last.N + 1
	}
	b.CreatedAt = tx.s.Now()
	if artifact != nil {
		if err := needBlob(tx, b.Digest); err != nil {
			return nil, err
		}
	}
	if err := tx.Create(b).Error; err != nil {
		return nil, err
	}
	if err := audit(tx, actor, "create-build", "module/"+module, fmt.Sprintf("build %d %s %s", b.Number, b.Version, b.Digest)); err != nil {
		return nil, err
	}
	before := mod
	if mod.CurrentBuild == nil {
		return &before, setCurrent(tx, &mod, b.Number)
	}
	return &before, nil
}

// Builds lists a module's builds, newest first.
func (s *Store) Builds(ctx context.Context, module string, limit int, cursor int64) ([]models.Build, *models.Module, error) {
	mod, err := s.Module(ctx, module)
	if err != nil {
		return nil, nil, err
	}
	var bs []models.Build
	q := s.db.WithContext(ctx).Where("module_id = ?", mod.ID).Order("number DESC").Limit(limit)
	if cursor > 0 {
		q = q.Where("number < ?", cursor)
	}
	return bs, mod, mapErr(q.Find(&bs).Error)
}

// Build reads one build of a module.
func (s *Store) Build(ctx context.Context, module string, number int64) (*models.Build, error) {
	mod, err := s.Module(ctx, module)
	if err != nil {
		return nil, err
	}
	var b models.Build
	if err := s.db.WithContext(ctx).Where("module_id = ? AND number = ?", mod.ID, number).First(&b).Error; err != nil {
		return nil, fmt.Errorf("module %s build %d: %w", module, number, mapErr(err))
	}
	return &b, nil
}

// lockBuild reads a module's build by number, locked on PostgreSQL with
// strength (UPDATE or SHARE; SQLite writes one at a time).
func lockBuild(tx *Tx, moduleID, number int64, strength string) (*models.Build, error) {
	var b models.Build
	q := tx.DB
	if tx.s.dialect == Postgres {
		q = q.Clauses(clause.Locking{Strength: strength})
	}
	if err := q.Where("module_id = ? AND number = ?", moduleID, number).First(&b).Error; err != nil {
		return nil, mapErr(err)
	}
	return &b, nil
}

// SetCurrent makes a build current everywhere at once: every machine
// assigned the module gets a new generation. A build older than the
// current one is made current only with a reason — going back, a person's
// choice made once for the module — and then every unpinned machine that
// runs a build newer than it, up to the one gone back from, is moved back
// to it, whatever plan reached it; without a reason no machine is ever
// given a build older than it runs. Going back is refused while a plan of
// a newer build is running, paused or halted (it would reach machines
// again with what the person left), and for a mesh-controller module (a
// controller may not know the store a newer one left).
func (s *Store) SetCurrent(ctx context.Context, actor, module string, number int64, reason string) (int, error) {
	// A reason of blanks is none (taken, it went back on a space).
	reason = strings.TrimSpace(reason)
	if len(reason) > MaxCurrentReason {
		return 0, models.Invalid("reason", fmt.Sprintf("at most %d bytes", MaxCurrentReason))
	}
	touched := 0
	err := s.write(ctx, func(tx *Tx) error {
		// Locked: whether this goes back is judged on the current build
		// as it is, not as a plan finishing or a person meanwhile left it.
		mod, err := lockModuleForBuild(tx, module)
		if err != nil {
			return err
		}
		// A build that can never be current says so first: no reason helps.
		if err := usableBuild(tx, mod, number); err != nil {
			return err
		}
		back := mod.Back()
		switch cur := mod.CurrentBuild; {
		case cur != nil && number < *cur:
			if reason == "" {
				return models.Invalid("reason", fmt.Sprintf("build %d is older than module %s's current build %d: going back moves every machine "+
					"that runs a newer build back to it, and that needs a reason (meshctl modules current %s %d --reason …)",
					number, module, *cur, module, number))
			}
			if err := mayGoBack(tx, mod, number); err != nil {
				return err
			}
			// It goes back from every build there is now: a machine that
			// runs any of them (a cancelled plan's, say) is moved back.
			var newest int64
			if err := tx.Model(&models.Build{}).Select("COALESCE(MAX(number), 0)").
				Where("module_id = ? AND state IN ?", mod.ID, finishedBuild).Scan(&newest).Error; err != nil {
				return err
			}
			back = models.GoneBack{Reason: reason, From: max(*cur, back.From, newest)}
			// No plan's target of a build it leaves holds a machine there,
			// nor a plan rollback's pin (the build before that plan, not
			// a person's choice of it): lifted, on the record.
			if err := tx.Where("module_id = ? AND build > ?", mod.ID, number).Delete(&models.MachineTarget{}).Error; err != nil {
				return err
			}
			var lifted []string
			if err := tx.Table("assignments").Joins("JOIN machines ON machines.id = assignments.machine_id").
				Where("assignments.module_id = ? AND assignments.pin_plan > 0 AND assignments.build > ?", mod.ID, number).
				Order("machines.name").Pluck("machines.name", &lifted).Error; err != nil {
				return err
			}
			if len(lifted) > 0 {
				if err := tx.Model(&models.Assignment{}).Where("module_id = ? AND pin_plan > 0 AND build > ?", mod.ID, number).
					Updates(map[string]any{"build": nil, "reason": "", "pin_plan": 0}).Error; err != nil {
					return err
				}
				for _, name := range lifted {
					if err := audit(tx, actor, "unpin", "machine/"+name, fmt.Sprintf("module %s gone back to build %d: its plan rollback's pin lifted", module, number)); err != nil {
						return err
					}
				}
			}
		case cur != nil && number == *cur:
			if back.Reason != "" && reason != "" {
				back.Reason = reason // still gone back, said anew
			}
		default:
			back = back.Forward(number) // forward: past what was gone back from, nothing is moved back
		}
		before := len(tx.bumps)
		if err := setCurrentWhy(tx, mod, number, back); err != nil {
			return err
		}
		touched = len(tx.bumps) - before
		detail := fmt.Sprintf("build %d, %d machine(s)", number, touched)
		if back.Reason != "" {
			detail += fmt.Sprintf("; gone back from build %d: %s", back.From, back.Reason)
		}
		// A plan of an older build would go on reaching tiers with a
		// build composing no longer sends, judge its machines by the
		// newer one they run, and end "done" saying its build is current.
		// Its own build's too: it no longer makes it current (paused
		// untried, it asked a person to resume it to do what was done).
		ended, err := supersedeBelow(tx, mod.ID, number+1, fmt.Sprintf("superseded: build %d was made current by %s", number, actor), tx.s.Now(), 0)
		if err != nil {
			return err
		}
		if len(ended) > 0 {
			detail += fmt.Sprintf("; plan(s) %s of it or older builds superseded", joinIDs(ended))
		}
		return audit(tx, actor, "set-current", "module/"+module, detail)
	})
	return touched, err
}

// mayGoBack refuses going back to build number while a plan of a newer
// build may still reach machines, and on a mesh-controller module.
func mayGoBack(tx *Tx, mod *models.Module, number int64) error {
	if mod.Kind == models.KindController {
		return fmt.Errorf("%w: module %s is a mesh-controller module: it is not gone back on for the whole fleet "+
			"(a controller may not know the store a newer one left); pin a control node to a build with a reason if you must", models.ErrConflict, mod.Name)
	}
	var active []models.Plan
	if err := tx.Where("module_id = ? AND build > ? AND state IN ?", mod.ID, number,
		[]string{models.PlanRunning, models.PlanPaused, models.PlanHalted}).Order("id").Find(&active).Error; err != nil {
		return err
	}
	if len(active) == 0 {
		return nil
	}
	var which []string
	for _, p := range active {
		act := "cancel it"
		if p.State == models.PlanHalted {
			act = "roll it back or cancel it"
		}
		which = append(which, fmt.Sprintf("plan %d of build %d is %s (%s: meshctl plans cancel %d)", p.ID, p.Build, p.State, act, p.ID))
	}
	return fmt.Errorf("%w: module %s is not gone back to build %d while a plan of a newer build may still reach its machines: %s",
		models.ErrConflict, mod.Name, number, strings.Join(which, "; "))
}

// MaxCurrentReason bounds the reason an older build is made current for.
const MaxCurrentReason = 500

// setCurrent makes a build current, on every path (by hand, a finished
// plan, a module's first build). Only a usable build becomes current: the
// build is read with a share lock, so a yank that commits first is seen
// and one that comes after waits. A build a plan or a first upload makes
// current is never a going back: the module's going back ends once its
// current build is past every build it went back from (GoneBack.Forward).
func setCurrent(tx *Tx, mod *models.Module, number int64) error {
	if err := usableBuild(tx, mod, number); err != nil {
		return err
	}
	return setCurrentWhy(tx, mod, number, mod.Back().Forward(number))
}

// setCurrentWhy writes build number current with the module's going back
// (zero: none; see models.ChooseBuild); the caller has found the build
// usable (usableBuild).
func setCurrentWhy(tx *Tx, mod *models.Module, number int64, back models.GoneBack) error {
	first := mod.CurrentBuild == nil
	if err := tx.Model(mod).Updates(map[string]any{"current_build": number, "current_reason": back.Reason, "current_back_from": back.From}).Error; err != nil {
		return err
	}
	if first {
		// A machine emptied on purpose while it kept this module, then
		// without a build (contributing), runs it now: it is not empty,
		// and a later empty declaration is no longer a person's choice.
		if err := tx.Model(&models.Machine{}).Where("empty_ok AND id IN (?)",
			tx.Model(&models.Assignment{}).Select("machine_id").Where("module_id = ?", mod.ID)).Update("empty_ok", false).Error; err != nil {
			return err
		}
	}
	return bumpAssigned(tx, mod.ID, models.TriggerCurrent)
}

// usableBuild reads a module's build with a share lock and refuses it
// unless it may become current.
func usableBuild(tx *Tx, mod *models.Module, number int64) error {
	b, err := lockBuild(tx, mod.ID, number, "SHARE")
	if err != nil {
		return fmt.Errorf("module %s build %d: %w", mod.Name, number, err)
	}
	if err := b.Usable(); err != nil {
		return fmt.Errorf("module %s: %w; it never becomes current", mod.Name, err)
	}
	return nil
}

// Assignments reads a machine's assignments, by module name.
func (s *Store) Assignments(ctx context.Context, name string) ([]models.AssignmentView, *models.Machine, error) {
	m, err := s.Machine(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	as, err := s.assignmentRows(ctx, m.ID, "assignments.assigned")
	return as, m, err
}

// AssignmentsAndSelected is what a person assigned to a machine, and what
// selectors give it besides (each with a plan rollback's pin, if one was
// made on it: a person's act too, shown where a person looks).
func (s *Store) AssignmentsAndSelected(ctx context.Context, name string) (assigned, selected []models.AssignmentView, m *models.Machine, err error) {
	if assigned, m, err = s.Assignments(ctx, name); err != nil {
		return nil, nil, nil, err
	}
	if selected, err = s.assignmentRows(ctx, m.ID, "NOT assignments.assigned AND assignments.selected"); err != nil {
		return nil, nil, nil, err
	}
	return assigned, selected, m, nil
}

// assignmentRows are a machine's assignment rows that meet cond, by module.
func (s *Store) assignmentRows(ctx context.Context, machineID int64, cond string) ([]models.AssignmentView, error) {
	out := []models.AssignmentView{}
	err := s.db.WithContext(ctx).Table("assignments").
		Select("modules.name AS module, assignments.build, assignments.reason").
		Joins("JOIN modules ON modules.id = assignments.module_id").
		Where("assignments.machine_id = ? AND "+cond, machineID).Order("modules.name").Scan(&out).Error
	return out, mapErr(err)
}

// SetAssignments replaces a machine's assignments under If-Match. A pin to an
// older build than the machine reports running needs a reason, and is
// recorded as the explicit act it is.
func (s *Store) SetAssignments(ctx context.Context, actor, name string, ifMatch *int64, as []models.AssignmentView) (*models.Machine, error) {
	var out *models.Machine
	err := s.write(ctx, func(tx *Tx) error {
		m, err := lockMachine(tx, name)
		if err != nil {
			return err
		}
		if err := checkIfMatch(m, ifMatch); err != nil {
			return err
		}
		running, err := m.RunningBuilds()
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		rows := make([]models.Assignment, 0, len(as))
		for i, a := range as {
			f := fmt.Sprintf("assignments[%d]", i)
			if seen[a.Module] {
				return models.Invalid(f+".module", "module "+a.Module+" is assigned twice")
			}
			seen[a.Module] = true
			var mod models.Module
			if err := tx.Where("name = ?", a.Module).First(&mod).Error; err != nil {
				return models.Invalid(f+".module", "no module named "+a.Module)
			}
			if a.Build != nil {
				b, err := lockBuild(tx, mod.ID, *a.Build, "SHARE")
				if errors.Is(err, models.ErrNotFound) {
					return models.Invalid(f+".build", fmt.Sprintf("module %s has no build %d", a.Module, *a.Build))
				}
				if err != nil {
					return err
				}
				if err := b.Usable(); err != nil {
					return models.Invalid(f+".build", fmt.Sprintf("module %s: %v; it is never pinned", a.Module, err))
				}
				if r, ok := running[a.Module]; ok && *a.Build < r.Build && a.Reason == "" {
					return fmt.Errorf("%w: machine %s runs %s build %d; a pin to build %d needs a reason", models.ErrDowngrade, name, a.Module, r.Build, *a.Build)
				}
			}
			rows = append(rows, models.Assignment{MachineID: m.ID, ModuleID: mod.ID, Build: a.Build, Reason: a.Reason, CreatedAt: s.Now(), Assigned: true})
		}
		if _, err := replaceAssigned(tx, m.ID, rows); err != nil {
			return err
		}
		// A person's empty list empties the machine on purpose, whatever
		// a selector keeps on it: the flag matters only when its
		// declaration is empty, which a kept module with resources keeps
		// it from being (counted, one with no build, or a build of no
		// resource, left an empty declaration its host refused while the
		// last module's services ran on).
		if err := tx.Model(m).Update("empty_ok", len(rows) == 0).Error; err != nil {
			return err
		}
		if err := bumpGenerations(tx, []int64{m.ID}, models.TriggerAssignment); err != nil {
			return err
		}
		desc, _ := json.Marshal(as)
		if err := audit(tx, actor, "set-assignments", "machine/"+name, string(desc)); err != nil {
			return err
		}
		out, err = lockMachine(tx, name)
		return err
	})
	return out, err
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// YankBuild marks a finished build bad, audited: machines that run it keep
// it (nothing is bumped), but it is never planned, pinned or made current
// again, and its plans still able to finish are cancelled. The current
// build cannot be yanked: another is made current first. Yanking a yanked
// build changes nothing.
func (s *Store) YankBuild(ctx context.Context, actor, module string, number int64, reason string) (*models.Build, error) {
	return Write(ctx, s, func(tx *Tx) (*models.Build, error) {
		var mod models.Module
		q := tx.DB
		if s.dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"}) // one plan decision per module at a time, as CreatePlan
		}
		if err := q.Where("name = ?", module).First(&mod).Error; err != nil {
			return nil, fmt.Errorf("module %s: %w", module, mapErr(err))
		}
		b, err := lockBuild(tx, mod.ID, number, "UPDATE")
		if err != nil {
			return nil, fmt.Errorf("module %s build %d: %w", module, number, err)
		}
		switch {
		case b.State == models.BuildYanked:
			return b, nil
		case b.State != models.BuildReady && b.State != "":
			return nil, fmt.Errorf("%w: module %s build %d is %s; only a finished build is yanked", models.ErrConflict, module, number, b.State)
		case mod.CurrentBuild != nil && *mod.CurrentBuild == number:
			return nil, fmt.Errorf("%w: module %s build %d is current; make another build current first", models.ErrConflict, module, number)
		}
		now := s.Now()
		if err := tx.Model(b).Updates(map[string]any{"state": models.BuildYanked, "yank_reason": reason, "yanked_by": actor, "yanked_at": now}).Error; err != nil {
			return nil, err
		}
		b.State, b.YankReason, b.YankedBy, b.YankedAt = models.BuildYanked, reason, actor, &now
		// Its unfinished plans are cancelled, and the build taken back
		// from the machines whose hosts have not applied it, as a cancel
		// does: a yanked build is the last to be sent on.
		var plans []models.Plan
		if err := tx.Where("module_id = ? AND build = ? AND state IN ?", mod.ID, number,
			[]string{models.PlanRunning, models.PlanPaused, models.PlanHalted}).Find(&plans).Error; err != nil {
			return nil, err
		}
		for i := range plans {
			why := fmt.Sprintf("cancelled: build %d was yanked by %s", number, actor)
			n, err := withdrawUnapplied(tx, &plans[i], "cancelled (its build yanked)")
			if err != nil {
				return nil, err
			}
			if n > 0 {
				why += fmt.Sprintf("; its target removed from %d machine(s) whose hosts had not applied it", n)
			}
			if err := tx.Model(&plans[i]).Updates(map[string]any{"state": models.PlanCancelled, "finished_at": now, "reason": why}).Error; err != nil {
				return nil, err
			}
		}
		return b, audit(tx, actor, "yank-build", "module/"+module, fmt.Sprintf("build %d: %s", number, reason))
	})
}

// joinIDs is ids as "1, 2, 3".
func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ", ")
}
