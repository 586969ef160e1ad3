package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"mesh/models"
)

// controllerFloor is the newest mesh-controller build anything runs: this
// instance (controllerBuild), any instance alive in the store, any control
// node by its reports. A plan below it would take a controller back to a
// binary that may not know the store; it says who runs the floor.
func controllerFloor(tx *Tx, mod *models.Module, controllerBuild int64) (int64, string, error) {
	floor, runs := controllerBuild, "this controller"
	var insts []models.Instance
	if err := tx.Where("state <> ? AND heartbeat_at > ?", models.InstanceStopped, tx.s.Now().Add(-instanceAlive)).Find(&insts).Error; err != nil {
		return 0, "", err
	}
	for _, in := range insts {
		if in.Build > floor {
			floor, runs = in.Build, "controller instance "+in.ID
		}
	}
	var ms []models.Machine
	if err := tx.Select("id", "name", "running").Where("id IN (?)", tx.Model(&models.Assignment{}).Select("machine_id").Where("module_id = ?", mod.ID)).
		Order("name").Find(&ms).Error; err != nil {
		return 0, "", err
	}
	for _, m := range ms {
		running, err := m.RunningBuilds()
		if err != nil {
			return 0, "", err
		}
		if b := running[mod.Name].Build; b > floor {
			floor, runs = b, "control node "+m.Name
		}
	}
	return floor, runs, nil
}

// instanceAlive is how recently an instance must have touched its row to
// count as running (several heartbeats).
const instanceAlive = 2 * time.Minute

// CreatePlan records a plan of a build. It never sends an older build:
// a plan older than a newer plan or than the current build ends
// superseded at once; a newer one supersedes the older plans still
// running. A plan that would give the control nodes an older
// mesh-controller than any controller or control node runs (controllerBuild
// is this instance's) is refused in its own words.
//
// hostRelease, when given, is the plan's host step: a rollout of that host
// release to the plan's machines whose hosts lack a schema it decodes,
// started with the plan; its tiers wait until the rollout is done, and the
// plan halts, saying why, if it halts or is cancelled. A release that
// cannot carry the build (models.CheckHostReleaseFirst) is refused.
func (s *Store) CreatePlan(ctx context.Context, actor, module string, build, controllerBuild int64, hostRelease string) (*models.PlanView, error) {
	return Write(ctx, s, func(tx *Tx) (*models.PlanView, error) {
		return tx.CreatePlan(actor, module, build, controllerBuild, hostRelease)
	})
}

// CreatePlan is Store.CreatePlan inside tx.
func (tx *Tx) CreatePlan(actor, module string, build, controllerBuild int64, hostRelease string) (*models.PlanView, error) {
	var out *models.PlanView
	err := func() error {
		var mod models.Module
		q := tx.DB
		if tx.s.dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"}) // one plan decision per module at a time
		}
		if err := q.Where("name = ?", module).First(&mod).Error; err != nil {
			return fmt.Errorf("module %s: %w", module, mapErr(err))
		}
		b, err := lockBuild(tx, mod.ID, build, "SHARE")
		if err != nil && !errors.Is(err, models.ErrNotFound) {
			return err
		}
		if b == nil || b.State != models.BuildReady && b.State != models.BuildYanked {
			return models.Invalid("build", fmt.Sprintf("module %s has no finished build %d", module, build))
		}
		var rels map[string]*models.Release
		if hostRelease != "" {
			if rels, err = hostStepReleases(tx, &mod, b, hostRelease); err != nil {
				return err
			}
		}
		now := tx.s.Now()
		p := &models.Plan{ModuleID: mod.ID, Module: mod.Name, Build: build, State: models.PlanRunning, CreatedBy: actor, CreatedAt: now,
			HostRelease: hostRelease}
		floor, runs := int64(0), ""
		if mod.Kind == models.KindController {
			var err error
			if floor, runs, err = controllerFloor(tx, &mod, controllerBuild); err != nil {
				return err
			}
		}
		var newer models.Plan
		q = tx.Where("module_id = ? AND build > ? AND state IN ?", mod.ID, build, []string{models.PlanRunning, models.PlanPaused, models.PlanDone})
		if back := mod.Back(); back.Reason != "" && mod.CurrentBuild != nil {
			// A done plan of a build the module went back from rolls
			// nothing out any more: a plan of a build in between is not
			// superseded by it.
			q = q.Where("NOT (state = ? AND build > ? AND build <= ?)", models.PlanDone, *mod.CurrentBuild, back.From)
		}
		err = q.Order("build DESC").First(&newer).Error
		switch {
		case b.State == models.BuildYanked:
			p.State = models.PlanRefused
			p.Reason = fmt.Sprintf("refused: build %d is yanked (%s); a yanked build is never rolled out", build, b.YankReason)
		case build < floor:
			p.State = models.PlanRefused
			p.Reason = fmt.Sprintf("refused: would downgrade mesh-controller from build %d to %d (%s runs build %d)", floor, build, runs, floor)
		case err == nil:
			p.State = models.PlanSuperseded
			verb := "rolls out"
			if newer.State == models.PlanDone {
				verb = "rolled out"
			}
			p.Reason = fmt.Sprintf("superseded: plan %d %s build %d, newer than %d", newer.ID, verb, newer.Build, build)
		case mod.CurrentBuild != nil && *mod.CurrentBuild > build:
			p.State = models.PlanSuperseded
			p.Reason = fmt.Sprintf("superseded: build %d is already current, newer than %d", *mod.CurrentBuild, build)
		case !errors.Is(err, gorm.ErrRecordNotFound):
			return err
		}
		if p.State != models.PlanRunning {
			p.FinishedAt = &now
		}
		if err := tx.Create(p).Error; err != nil {
			return err
		}
		if p.State == models.PlanRunning {
			if err := planSteps(tx, p, &mod); err != nil {
				return err
			}
		}
		what := fmt.Sprintf("plan %d, build %d: %s %s", p.ID, build, p.State, p.Reason)
		if hostRelease != "" {
			what += "; host release " + hostRelease + " first"
		}
		if err := audit(tx, actor, "create-plan", "module/"+module, what); err != nil {
			return err
		}
		if p.State == models.PlanRunning && hostRelease != "" {
			if err := startHostStep(tx, actor, p, rels); err != nil {
				return err
			}
		}
		began := p.State == models.PlanRunning
		if err := stepPlan(tx, p); err != nil {
			return err
		}
		if began {
			// After its first tier is reached: a machine the older plan
			// sent its build and this one reached at once has this one's
			// target, and is not moved twice (a generation naming the
			// current build, then one naming this build).
			if err := supersedeOlder(tx, p, now); err != nil {
				return err
			}
		}
		var err2 error
		out, err2 = planViewAfterMoves(tx, p)
		return err2
	}()
	return out, err
}

// planSteps lays the machines assigned the module out in tiers: canaries
// (variable canary=true) first, then by name.
func planSteps(tx *Tx, p *models.Plan, mod *models.Module) error {
	// A machine a person pinned to a build of the module keeps it: a plan
	// cannot move it, so it is no step (waiting for it halted the plan
	// "did not report" though it had applied). A pin a plan's rollback
	// set is lifted by the newer plan, and its machine is a step.
	var ms []models.Machine
	if err := tx.Joins("JOIN assignments ON assignments.machine_id = machines.id").
		Where("assignments.module_id = ? AND NOT (assignments.build IS NOT NULL AND assignments.pin_plan = 0)", mod.ID).
		Order("machines.name").Find(&ms).Error; err != nil {
		return err
	}
	var flagged []int64
	if err := tx.Model(&models.MachineVariable{}).Where("key = ? AND value = ?", "canary", "true").Pluck("machine_id", &flagged).Error; err != nil {
		return err
	}
	canary := map[int64]bool{}
	for _, id := range flagged {
		canary[id] = true
	}
	sort.SliceStable(ms, func(i, j int) bool { return canary[ms[i].ID] && !canary[ms[j].ID] })
	tiers, err := mod.TierList()
	if err != nil {
		return err
	}
	i := 0
	for t, tr := range tiers {
		upto := len(ms)
		if tr.Machines > 0 {
			upto = i + min(tr.Machines, len(ms)-i) // i+Machines wraps for the largest int
		} else if tr.Percent > 0 {
			upto = min(len(ms), max(i, int(math.Ceil(float64(len(ms)*tr.Percent)/100))))
		}
		if t == len(tiers)-1 {
			upto = len(ms)
		}
		for ; i < upto; i++ {
			if err := tx.Create(&models.PlanStep{PlanID: p.ID, MachineID: ms[i].ID, Tier: int64(t), State: models.StepPending, MachineName: ms[i].Name}).Error; err != nil {
				return err
			}
		}
	}
	return nil
}

// StepPlans advances every running plan; plans are rows, so a restarted
// controller continues where the last left off, and a step is one
// transaction, so none runs twice. A halted plan is stepped while steps
// of its tier wait on their hosts' reports (judgeStopped).
func (s *Store) StepPlans(ctx context.Context) error {
	var ids []int64
	if err := s.db.WithContext(ctx).Model(&models.Plan{}).
		Where("state IN ? OR state = ? AND EXISTS (SELECT 1 FROM plan_steps WHERE plan_steps.plan_id = plans.id AND plan_steps.tier = plans.tier AND plan_steps.state = ?)",
			[]string{models.PlanRunning, models.PlanPaused}, models.PlanHalted, models.StepSent).
		Order("id").Pluck("id", &ids).Error; err != nil {
		return mapErr(err)
	}
	// One plan that cannot be stepped does not hold up the plans after
	// it: each is stepped, and what failed is said together.
	var errs []error
	for _, id := range ids {
		if err := s.StepPlan(ctx, id); err != nil {
			if ctx.Err() != nil {
				return err
			}
			errs = append(errs, fmt.Errorf("plan %d: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// judgeStopped records, while a plan is paused or halted, the steps of its
// tier whose machines have applied its build since: a pause or a halt
// stops the plan reaching machines and moving on, not the record of what
// its machines did (its page said "awaiting its host's report" of a
// canary that had reported, just when a person paused to look at it, and
// of the machines of a halted tier that had reported, when a person reads
// them to choose between resuming and rolling back). Nothing is failed
// while it is stopped — no deadline runs out on a person's look — and a
// failure is judged when it resumes, as before.
func judgeStopped(tx *Tx, p *models.Plan) error {
	var steps []models.PlanStep
	if err := tx.Where("plan_id = ? AND tier = ? AND state = ?", p.ID, p.Tier, models.StepSent).Order("machine_id").Find(&steps).Error; err != nil {
		return err
	}
	if len(steps) == 0 {
		return nil
	}
	var module string
	if err := tx.Model(&models.Module{}).Where("id = ?", p.ModuleID).Pluck("name", &module).Error; err != nil {
		return err
	}
	now := tx.s.Now()
	for i := range steps {
		st := &steps[i]
		v, err := judgeSent(tx, st, module, p.Build, math.MaxInt64, now)
		if err != nil {
			return err
		}
		if v.State != models.StepApplied {
			continue
		}
		if err := tx.Model(&models.PlanStep{}).Where("plan_id = ? AND machine_id = ?", p.ID, st.MachineID).
			Updates(map[string]any{"state": models.StepApplied, "finished_at": now, "reason": v.Reason}).Error; err != nil {
			return err
		}
	}
	return nil
}

// judgeSent judges a sent step of build by its machine's records
// (models.JudgeStep), with the store's answers to what the machine's row
// cannot say: whether a held-back or compose error still stands, and
// whether a generation its host did not report within the deadline was
// ever sent. A machine deleted meanwhile gives no verdict (DeleteMachine
// withdrew its step).
func judgeSent(tx *Tx, st *models.PlanStep, module string, build int64, deadline time.Duration, now time.Time) (models.StepVerdict, error) {
	var m models.Machine
	err := tx.Where("id = ?", st.MachineID).First(&m).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return models.StepVerdict{}, nil
	}
	if err != nil {
		return models.StepVerdict{}, err
	}
	running, err := m.RunningBuilds()
	if err != nil {
		return models.StepVerdict{}, err
	}
	if err := heldBackSince(tx, &m); err != nil {
		return models.StepVerdict{}, err
	}
	if err := composeErrorSince(tx, &m, st.Generation); err != nil {
		return models.StepVerdict{}, err
	}
	v := models.JudgeStep(tx.s.Rules, &m, running[module].Build, st, build, deadline, now)
	if v.Unreported {
		// Its host was heard from but never polled for the step's
		// generation: said so, not only that it did not report.
		var sends int64
		if err := tx.Model(&models.Send{}).Where("machine_id = ? AND generation >= ?", m.ID, st.Generation).Count(&sends).Error; err != nil {
			return models.StepVerdict{}, err
		}
		if sends == 0 {
			v.Reason += fmt.Sprintf(": it was never sent (its host last polled %s)", models.Ago(*m.LastSeen, now))
		}
	}
	return v, nil
}

// StepPlan advances one plan if it is running.
func (s *Store) StepPlan(ctx context.Context, id int64) error {
	return s.write(ctx, func(tx *Tx) error {
		var p models.Plan
		q := tx.DB
		if s.dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE", Options: "SKIP LOCKED"})
		}
		if err := q.Where("id = ?", id).First(&p).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return nil // another instance holds it
			}
			return err
		}
		return stepPlan(tx, &p)
	})
}

func stepPlan(tx *Tx, p *models.Plan) error {
	if p.State == models.PlanPaused || p.State == models.PlanHalted {
		return judgeStopped(tx, p)
	}
	if p.State != models.PlanRunning {
		return nil
	}
	now := tx.s.Now()
	var mod models.Module
	if err := tx.Where("id = ?", p.ModuleID).First(&mod).Error; err != nil {
		return err
	}
	if p.HostRelease != "" && p.Tier == 0 {
		// The first tier waits for the host step: its steps are reached
		// (and their deadline starts) only once the rollout is done.
		ro, err := hostStep(tx, p.ID)
		if err != nil {
			return err
		}
		done, halt := models.JudgeHostStep(p.HostRelease, ro)
		if halt != "" {
			p.State, p.Reason = models.PlanHalted, "halted: "+halt
			if err := audit(tx, "controller", "plan-halted", "module/"+mod.Name, fmt.Sprintf("plan %d: %s", p.ID, p.Reason)); err != nil {
				return err
			}
			return tx.Model(p).Updates(map[string]any{"state": p.State, "reason": p.Reason, "finished_at": now}).Error
		}
		if !done {
			return nil
		}
	}
	var steps []models.PlanStep
	if err := tx.Where("plan_id = ? AND tier = ?", p.ID, p.Tier).Order("machine_id").Find(&steps).Error; err != nil {
		return err
	}
	if len(steps) == 0 {
		var more int64
		if err := tx.Model(&models.PlanStep{}).Where("plan_id = ? AND tier > ?", p.ID, p.Tier).Count(&more).Error; err != nil {
			return err
		}
		if more > 0 {
			p.Tier++
			if err := tx.Model(p).Update("tier", p.Tier).Error; err != nil {
				return err
			}
			return stepPlan(tx, p)
		}
		if paused, err := pauseAllPinned(tx, p, &mod); err != nil || paused {
			return err
		}
		return finishPlan(tx, p, &mod)
	}
	done := 0
	var failed []string
	var applied []int64 // machines whose step applied before this look
	took := 0           // steps of the tier that applied the build, now or before
	deadline := time.Duration(mod.TierDeadlineSeconds) * time.Second
	if deadline <= 0 {
		deadline = DefaultTierDeadline
	}
	// A machine a person pinned to a build of the module since the plan
	// began cannot be moved by it: its step is withdrawn, said why, rather
	// than waited for until the tier's deadline halts the plan.
	var pins []models.Assignment
	if err := tx.Where("module_id = ? AND build IS NOT NULL AND pin_plan = 0 AND machine_id IN (?)", p.ModuleID,
		tx.Model(&models.PlanStep{}).Select("machine_id").Where("plan_id = ? AND tier = ?", p.ID, p.Tier)).Find(&pins).Error; err != nil {
		return err
	}
	pinned := map[int64]int64{}
	for _, a := range pins {
		pinned[a.MachineID] = *a.Build
	}
	// So is a machine that no longer has the module (a person took it
	// away, or its labels no longer select it): what it applies no longer
	// runs the module, so its step would wait for a build it never runs
	// and halt the plan blaming its host.
	var goneIDs []int64
	if err := tx.Model(&models.PlanStep{}).Where("plan_id = ? AND tier = ? AND state IN ? AND machine_id NOT IN (?)", p.ID, p.Tier,
		[]string{models.StepPending, models.StepSent}, tx.Model(&models.Assignment{}).Select("machine_id").Where("module_id = ?", p.ModuleID)).
		Pluck("machine_id", &goneIDs).Error; err != nil {
		return err
	}
	gone := map[int64]bool{}
	for _, id := range goneIDs {
		gone[id] = true
	}
	// And a revoked machine: nothing is sent to it again, so its step
	// would wait until the deadline halted the plan blaming its host.
	var revokedMs []models.Machine
	if err := tx.Select("id", "revoked_reason").Where("revoked_at IS NOT NULL AND id IN (?)",
		tx.Model(&models.PlanStep{}).Select("machine_id").Where("plan_id = ? AND tier = ? AND state IN ?", p.ID, p.Tier,
			[]string{models.StepPending, models.StepSent})).Find(&revokedMs).Error; err != nil {
		return err
	}
	revoked := map[int64]string{}
	for _, m := range revokedMs {
		revoked[m.ID] = m.RevokedReason
	}
	for i := range steps {
		st := &steps[i]
		b, pin := pinned[st.MachineID]
		rr, isRevoked := revoked[st.MachineID]
		if (pin || gone[st.MachineID] || isRevoked) && (st.State == models.StepPending || st.State == models.StepSent) {
			why := fmt.Sprintf("pinned to build %d by a person since the plan began: the plan does not move it", b)
			switch {
			case gone[st.MachineID]:
				why = fmt.Sprintf("no longer has module %s (taken away since the plan began, or the machine deleted): the plan does not reach it", mod.Name)
			case isRevoked:
				why = fmt.Sprintf("revoked (%s): nothing is sent to it, so the plan does not reach it", cmp.Or(rr, "no reason given"))
			}
			if err := tx.Model(&models.PlanStep{}).Where("plan_id = ? AND machine_id = ?", p.ID, st.MachineID).
				Updates(map[string]any{"state": models.StepWithdrawn, "finished_at": now, "reason": why}).Error; err != nil {
				return err
			}
			st.State, st.Reason = models.StepWithdrawn, why
		}
		switch st.State {
		case models.StepWithdrawn:
			done++
		case models.StepPending:
			if err := reach(tx, p, &mod, st); err != nil {
				return err
			}
		case models.StepSent:
			v, err := judgeSent(tx, st, mod.Name, p.Build, deadline, now)
			if err != nil {
				return err
			}
			if v.State == "" {
				continue
			}
			up := map[string]any{"state": v.State, "finished_at": now, "reason": v.Reason}
			if err := tx.Model(&models.PlanStep{}).Where("plan_id = ? AND machine_id = ?", p.ID, st.MachineID).Updates(up).Error; err != nil {
				return err
			}
			if v.State == models.StepFailed {
				failed = append(failed, v.Reason)
				continue
			}
			done++
			took++
		case models.StepApplied:
			applied = append(applied, st.MachineID)
			done++
			took++
		}
	}
	// A machine of the tier that applied the build healthy and turned
	// unhealthy since (its check failing past the grace) fails its step as
	// if judged so now: the plan halts rather than finish on it.
	if len(applied) > 0 {
		var ms []models.Machine
		if err := inChunks(applied, 500, func(ids []int64) error {
			var part []models.Machine
			err := tx.Where("id IN ?", ids).Find(&part).Error
			ms = append(ms, part...)
			return err
		}); err != nil {
			return err
		}
		for i := range ms {
			m := &ms[i]
			if !tx.s.Rules.Unhealthy(m, now) {
				continue
			}
			why := models.UnhealthyWords(m)
			if err := tx.Model(&models.PlanStep{}).Where("plan_id = ? AND machine_id = ?", p.ID, m.ID).
				Updates(map[string]any{"state": models.StepFailed, "finished_at": now, "reason": why}).Error; err != nil {
				return err
			}
			failed = append(failed, why)
			done--
		}
	}
	if len(failed) > 0 {
		// Halted, loudly: the reason names each machine and what it said.
		var tiers int64
		if err := tx.Model(&models.PlanStep{}).Where("plan_id = ?", p.ID).Select("COALESCE(MAX(tier), 0) + 1").Scan(&tiers).Error; err != nil {
			return err
		}
		p.State = models.PlanHalted
		p.Reason = "halted: " + models.TierWords(p.Tier, tiers, false) + ": " + strings.Join(failed, "; ")
		if err := audit(tx, "controller", "plan-halted", "module/"+mod.Name, fmt.Sprintf("plan %d: %s", p.ID, p.Reason)); err != nil {
			return err
		}
		if mod.OnFailure == models.OnFailureRollback && mod.Kind == models.KindService {
			// The module's declared policy: rolled back at once, on the
			// record as the policy's, never for a mesh-controller module.
			rolled, err := rollbackPlan(tx, p, "policy:on_failure=rollback")
			if err != nil {
				return err
			}
			p.State, p.Reason = models.PlanRolledBack, p.Reason+"; "+rolled
		}
		return tx.Model(p).Updates(map[string]any{"state": p.State, "reason": p.Reason, "finished_at": now}).Error
	}
	if done == len(steps) {
		if took == 0 {
			n, err := tookByPin(tx, p, mod.Name, p.Tier)
			if err != nil {
				return err
			}
			took += n
		}
		if took == 0 {
			// Every step of the tier withdrawn (pinned, the module taken
			// away): no machine of it tried the build. Going on would pass
			// the next tier (or, after the last, the module's current
			// build) a build no gate saw applied; a person says whether to.
			paused, err := pauseUntried(tx, p, mod.Name, steps)
			if err != nil || paused {
				return err
			}
		}
		p.Tier++
		if err := tx.Model(p).Update("tier", p.Tier).Error; err != nil {
			return err
		}
		return stepPlan(tx, p)
	}
	return nil
}

// pauseUntried pauses a plan whose tier ended with none of its machines
// having taken the build, when a later tier is still to come: paused
// says so (the tier, the build, each step's reason), and resuming it goes
// on to the next tier as a person's choice, on the record.
func pauseUntried(tx *Tx, p *models.Plan, module string, steps []models.PlanStep) (bool, error) {
	var tiers int64
	if err := tx.Model(&models.PlanStep{}).Select("COALESCE(MAX(tier), 0) + 1").Where("plan_id = ?", p.ID).Scan(&tiers).Error; err != nil {
		return false, err
	}
	last := p.Tier+1 >= tiers
	if last {
		// After the last tier the build becomes current: that waits for a
		// person only if no machine of the plan took it.
		var ran int64
		if err := tx.Model(&models.PlanStep{}).Where("plan_id = ? AND state = ?", p.ID, models.StepApplied).Count(&ran).Error; err != nil {
			return false, err
		}
		if ran > 0 {
			return false, nil
		}
		if n, err := tookByPin(tx, p, module, -1); err != nil || n > 0 {
			return false, err
		}
	}
	var ms []models.Machine
	if err := tx.Select("id", "name").Where("id IN (?)", tx.Model(&models.PlanStep{}).Select("machine_id").
		Where("plan_id = ? AND tier = ?", p.ID, p.Tier)).Find(&ms).Error; err != nil {
		return false, err
	}
	name := map[int64]string{}
	for _, m := range ms {
		name[m.ID] = m.Name
	}
	whys := make([]string, len(steps))
	for i, st := range steps {
		n, ok := name[st.MachineID]
		if !ok {
			n = cmp.Or(st.MachineName, fmt.Sprintf("#%d", st.MachineID)) + " (deleted)"
		}
		whys[i] = n + ": " + st.Reason
	}
	slices.Sort(whys)
	next := fmt.Sprintf("go on to tier %d of %d untried", p.Tier+2, tiers)
	if last {
		next = fmt.Sprintf("make build %d current untried (no machine of the plan took it)", p.Build)
	}
	p.State = models.PlanPaused
	p.Reason = models.Clip(fmt.Sprintf("%s%s took build %d on none of its machines: resume to %s, or cancel (%s)",
		models.UntriedTierPause, models.TierWords(p.Tier, tiers, false), p.Build, next, strings.Join(whys, "; ")), 1000)
	if err := audit(tx, "controller", "pause-plan", "module/"+module, fmt.Sprintf("plan %d: %s", p.ID, p.Reason)); err != nil {
		return false, err
	}
	return true, tx.Model(p).Updates(map[string]any{"state": p.State, "reason": p.Reason}).Error
}

// pauseAllPinned pauses a plan without a step when its module's machines
// were all pinned by a person before it began (they are no steps of it, so
// no tier saw them), or holds it running while one pinned to its build has
// yet to report running it; true when the plan is not to finish now: the module's current build would
// otherwise become one no machine tried. A module with no machines has
// nothing to try it on, and a pinned machine that runs the build or a
// newer one took it.
func pauseAllPinned(tx *Tx, p *models.Plan, mod *models.Module) (bool, error) {
	// A plan with steps is judged tier by tier (pauseUntried); one a
	// person resumed from this pause is past tier 0; one whose build a
	// person made current meanwhile is done.
	if p.Tier > 0 || (mod.CurrentBuild != nil && *mod.CurrentBuild >= p.Build) {
		return false, nil
	}
	var steps int64
	if err := tx.Model(&models.PlanStep{}).Where("plan_id = ?", p.ID).Count(&steps).Error; err != nil || steps > 0 {
		return false, err
	}
	// The module's machines now: pinned by a person when the plan began,
	// some may have been unpinned since (they follow the current build,
	// and no tier of this plan reaches them); a revoked one is heard from
	// no more, so it is not waited for.
	var ms []struct {
		models.Machine
		Pin *int64
	}
	if err := tx.Table("machines").Select("machines.id, machines.name, machines.running, "+
		"CASE WHEN assignments.pin_plan = 0 THEN assignments.build END AS pin").
		Joins("JOIN assignments ON assignments.machine_id = machines.id").
		Where("assignments.module_id = ? AND machines.revoked_at IS NULL", mod.ID).Order("machines.name").Scan(&ms).Error; err != nil || len(ms) == 0 {
		return false, err
	}
	names := make([]string, 0, min(len(ms), 10))
	var waiting []string
	for i := range ms {
		if running, err := ms[i].RunningBuilds(); err == nil && running[mod.Name].Build >= p.Build {
			return false, nil
		}
		if ms[i].Pin != nil && *ms[i].Pin >= p.Build {
			waiting = append(waiting, ms[i].Name)
		}
		if i < 10 {
			names = append(names, ms[i].Name)
		}
	}
	if len(waiting) > 0 {
		// Pinned to the build (or a newer one), such a machine takes it
		// once its host reports running it: the plan waits for that,
		// running, rather than pausing as if none could.
		why := models.Clip(fmt.Sprintf("waiting: no machine of module %s is a step of it, each pinned by a person when it began; build %d "+
			"becomes current once the host of one pinned to it reports running it (%s)", mod.Name, p.Build, strings.Join(waiting, ", ")), 1000)
		if p.Reason != why {
			p.Reason = why
			return true, tx.Model(p).Update("reason", p.Reason).Error
		}
		return true, nil
	}
	if len(ms) > len(names) {
		names = append(names, fmt.Sprintf("and %d more", len(ms)-len(names)))
	}
	p.State = models.PlanPaused
	p.Reason = models.Clip(fmt.Sprintf("%sbuild %d reached none of module %s's machines, each pinned by a person when it began (%s): "+
		"resume to make build %d current untried, or cancel", models.UntriedTierPause, p.Build, mod.Name, strings.Join(names, ", "), p.Build), 1000)
	if err := audit(tx, "controller", "pause-plan", "module/"+mod.Name, fmt.Sprintf("plan %d: %s", p.ID, p.Reason)); err != nil {
		return false, err
	}
	return true, tx.Model(p).Updates(map[string]any{"state": p.State, "reason": p.Reason}).Error
}

// tookByPin counts the plan's withdrawn steps (of one tier; of every tier
// when tier < 0) whose machines a person pinned to the plan's build or a
// newer one and whose hosts report running it: such a machine took the
// build, though the plan did not move it (a pin alone is no proof it
// applied).
func tookByPin(tx *Tx, p *models.Plan, module string, tier int64) (int, error) {
	steps := tx.Model(&models.PlanStep{}).Select("machine_id").Where("plan_id = ? AND state = ?", p.ID, models.StepWithdrawn)
	if tier >= 0 {
		steps = steps.Where("tier = ?", tier)
	}
	var ms []models.Machine
	if err := tx.Select("id", "name", "running").Where("id IN (?) AND id IN (?)", steps,
		tx.Model(&models.Assignment{}).Select("machine_id").Where("module_id = ? AND build >= ? AND pin_plan = 0", p.ModuleID, p.Build)).
		Find(&ms).Error; err != nil {
		return 0, err
	}
	n := 0
	for i := range ms {
		if running, err := ms[i].RunningBuilds(); err == nil && running[module].Build >= p.Build {
			n++
		}
	}
	return n, nil
}

// reach makes the plan's build a machine's target: a new generation. The
// target only ever rises, so an older plan's step cannot lower it. A
// target of the same build an earlier plan set becomes this plan's: that
// plan is superseded once this one has reached its first tier, and its
// withdrawal took the build back from the machines this one had just
// reached.
func reach(tx *Tx, p *models.Plan, mod *models.Module, st *models.PlanStep) error {
	var m models.Machine
	if err := tx.Select("id", "name", "running").Where("id = ?", st.MachineID).First(&m).Error; err != nil {
		return err
	}
	running, err := m.RunningBuilds()
	if err != nil {
		return err
	}
	st.PreviousBuild = running[mod.Name].Build
	if err := liftRollbackPin(tx, p, &m); err != nil {
		return err
	}
	var cur models.MachineTarget
	err = tx.Where("machine_id = ? AND module_id = ?", st.MachineID, p.ModuleID).First(&cur).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		if err := tx.Create(&models.MachineTarget{MachineID: st.MachineID, ModuleID: p.ModuleID, Build: p.Build, PlanID: p.ID}).Error; err != nil {
			return err
		}
	case err != nil:
		return err
	case cur.Build < p.Build, cur.Build == p.Build && cur.PlanID != p.ID:
		if err := tx.Model(&models.MachineTarget{}).Where("machine_id = ? AND module_id = ?", st.MachineID, p.ModuleID).
			Updates(map[string]any{"build": p.Build, "plan_id": p.ID}).Error; err != nil {
			return err
		}
	}
	before := len(tx.bumps)
	if err := bumpGenerations(tx, []int64{st.MachineID}, models.TriggerPlan); err != nil {
		return err
	}
	now := tx.s.Now()
	st.State, st.StartedAt = models.StepSent, &now
	if len(tx.bumps) > before {
		st.Generation = tx.bumps[len(tx.bumps)-1].Generation
	}
	return tx.Model(&models.PlanStep{}).Where("plan_id = ? AND machine_id = ?", p.ID, st.MachineID).
		Updates(map[string]any{"state": st.State, "started_at": now, "generation": st.Generation, "previous_build": st.PreviousBuild}).Error
}

// liftRollbackPin lifts, on the record, a pin an older plan's rollback set
// on m, when a newer build's plan reaches it.
func liftRollbackPin(tx *Tx, p *models.Plan, m *models.Machine) error {
	var a models.Assignment
	err := tx.Where("machine_id = ? AND module_id = ? AND pin_plan > 0", m.ID, p.ModuleID).First(&a).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil
	}
	if err != nil || a.Build == nil || *a.Build >= p.Build {
		return err
	}
	// Only the rollback's pin: a person's, made since it was read, is the
	// row's now and stays (the update's condition is judged again on it).
	up := tx.Model(&models.Assignment{}).Where("machine_id = ? AND module_id = ? AND pin_plan = ?", m.ID, p.ModuleID, a.PinPlan).
		Updates(map[string]any{"build": nil, "reason": "", "pin_plan": 0})
	if up.Error != nil || up.RowsAffected == 0 {
		return up.Error
	}
	return audit(tx, "controller", "unpin", "machine/"+m.Name,
		fmt.Sprintf("plan %d of build %d lifts the pin to build %d set by the rollback of plan %d", p.ID, p.Build, *a.Build, a.PinPlan))
}

// DefaultTierDeadline is how long a tier may take when its module says nothing.
const DefaultTierDeadline = 10 * time.Minute

// finishPlan makes the build current (never lowering it) and ends the plan.
func finishPlan(tx *Tx, p *models.Plan, mod *models.Module) error {
	now := tx.s.Now()
	// Read again, locked: a person who made a newer build current since
	// the plan was read is not taken back to the plan's.
	q := tx.DB
	if tx.s.dialect == Postgres {
		q = q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	if err := q.Where("id = ?", mod.ID).First(mod).Error; err != nil {
		return err
	}
	if err := tx.Where("module_id = ? AND build <= ?", p.ModuleID, p.Build).Delete(&models.MachineTarget{}).Error; err != nil {
		return err
	}
	if mod.CurrentBuild != nil && *mod.CurrentBuild > p.Build {
		// A newer build was made current meanwhile (its plan or a person
		// supersede this one as they do; this is the race they lost): the
		// plan did not make its build current and does not say it did.
		p.State, p.Reason = models.PlanSuperseded, fmt.Sprintf("superseded: build %d was made current, newer than %d", *mod.CurrentBuild, p.Build)
		if err := tx.Model(p).Updates(map[string]any{"state": p.State, "reason": p.Reason, "finished_at": now}).Error; err != nil {
			return err
		}
		return audit(tx, "controller", "plan-superseded", "module/"+mod.Name, fmt.Sprintf("plan %d: %s", p.ID, p.Reason))
	}
	if mod.CurrentBuild == nil || *mod.CurrentBuild < p.Build {
		if err := setCurrent(tx, mod, p.Build); err != nil {
			return err
		}
	}
	p.State, p.Reason = models.PlanDone, ""
	if err := tx.Model(p).Updates(map[string]any{"state": p.State, "reason": "", "finished_at": now}).Error; err != nil {
		return err
	}
	return audit(tx, "controller", "plan-done", "module/"+mod.Name, fmt.Sprintf("plan %d: build %d is current", p.ID, p.Build))
}

func planView(tx *Tx, p *models.Plan) (*models.PlanView, error) {
	v := &models.PlanView{Plan: *p, Steps: []models.PlanStep{}}
	var mod models.Module
	if err := tx.Where("id = ?", p.ModuleID).First(&mod).Error; err != nil {
		return nil, err
	}
	v.Module = mod.Name
	var rows []struct {
		models.PlanStep
		Name               string
		SeenAt, EnrolledAt *time.Time
	}
	err := tx.Table("plan_steps").Select("plan_steps.*, "+deletedOrName("plan_steps")+" AS name, machines.last_seen AS seen_at, machines.created_at AS enrolled_at").
		Joins("LEFT JOIN machines ON machines.id = plan_steps.machine_id").
		Where("plan_id = ?", p.ID).Order("plan_steps.tier, name").Scan(&rows).Error
	if err != nil {
		return nil, err
	}
	// A plan that ended (done, cancelled, rolled back, superseded)
	// reaches no step it had not reached: such a step is said withdrawn,
	// with why, not "pending" as if it were still to come.
	ended := p.State != models.PlanRunning && p.State != models.PlanPaused && p.State != models.PlanHalted
	for _, r := range rows {
		r.PlanStep.Machine = r.Name
		r.PlanStep.SetMachineSeen(r.SeenAt, r.EnrolledAt)
		if ended && r.State == models.StepPending {
			r.PlanStep.State = models.StepWithdrawn
			r.PlanStep.Reason = "never reached: the plan was " + strings.ReplaceAll(p.State, "_", " ") + " first"
			r.PlanStep.FinishedAt = p.FinishedAt
		}
		v.Steps = append(v.Steps, r.PlanStep)
	}
	v.PinnedAside = []models.PinnedAside{}
	if err := tx.Table("assignments").Select("machines.name AS machine, assignments.build AS build, assignments.reason AS reason").
		Joins("JOIN machines ON machines.id = assignments.machine_id").
		Where("assignments.module_id = ? AND assignments.build IS NOT NULL AND assignments.pin_plan = 0 AND assignments.machine_id NOT IN (?)",
			p.ModuleID, tx.Model(&models.PlanStep{}).Select("machine_id").Where("plan_id = ?", p.ID)).
		Order("machines.name").Limit(models.MaxPinnedAside).Scan(&v.PinnedAside).Error; err != nil {
		return nil, err
	}
	if p.HostRelease != "" {
		ro, err := hostStep(tx, p.ID)
		if err != nil || ro == nil {
			return v, err
		}
		if v.HostStep, err = rolloutView(tx, ro); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// planViewAfterMoves is planView of a plan updated in this transaction:
// its moves as the store has them now — each update counted one in SQL
// (Plan.BeforeUpdate), which the struct in hand does not see.
func planViewAfterMoves(tx *Tx, p *models.Plan) (*models.PlanView, error) {
	if err := tx.Model(&models.Plan{}).Select("moves").Where("id = ?", p.ID).Scan(&p.Moves).Error; err != nil {
		return nil, err
	}
	return planView(tx, p)
}

// Plan reads one plan with its steps.
func (s *Store) Plan(ctx context.Context, id int64) (*models.PlanView, error) {
	var out *models.PlanView
	err := s.db.WithContext(ctx).Transaction(func(db *gorm.DB) error {
		var p models.Plan
		if err := db.Where("id = ?", id).First(&p).Error; err != nil {
			return fmt.Errorf("plan %d: %w", id, mapErr(err))
		}
		var err error
		out, err = planView(&Tx{DB: db, s: s}, &p)
		return err
	})
	return out, err
}

// Plans lists plans newest first, with their steps.
// LivePlans are the plans still running, paused or halted, newest first,
// of ids below before (0: any), at most limit.
func (s *Store) LivePlans(ctx context.Context, before int64, limit int) ([]models.PlanView, error) {
	var ids []int64
	q := s.db.WithContext(ctx).Model(&models.Plan{}).Where("state IN ?", []string{models.PlanRunning, models.PlanPaused, models.PlanHalted})
	if before > 0 {
		q = q.Where("id < ?", before)
	}
	if err := q.Order("id DESC").Limit(limit).Pluck("id", &ids).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make([]models.PlanView, 0, len(ids))
	for _, id := range ids {
		v, err := s.Plan(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, *v)
	}
	return out, nil
}

func (s *Store) Plans(ctx context.Context, limit int, cursor int64) ([]models.PlanView, error) {
	var ps []models.Plan
	q := s.db.WithContext(ctx).Order("id DESC").Limit(limit)
	if cursor > 0 {
		q = q.Where("id < ?", cursor)
	}
	if err := q.Find(&ps).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make([]models.PlanView, 0, len(ps))
	for _, p := range ps {
		v, err := s.Plan(ctx, p.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, *v)
	}
	return out, nil
}

// SetPlanState pauses, resumes, cancels or rolls back a plan, as
// models.PlanMove allows from its state, wherever it is now.
func (s *Store) SetPlanState(ctx context.Context, actor string, id int64, action string) (*models.PlanView, error) {
	return s.ActOnPlan(ctx, actor, id, action, models.PlanSeen{})
}

// ActOnPlan is SetPlanState for a person who decided on what they saw
// (models.PlanSeen): the act is refused (409, nothing changed) if the
// plan has moved since. A resume repeated — a double click, a retry, a
// second person — would otherwise answer a pause or a halt its sender
// never saw: the first resume's tier may pause untried at once, a halted
// tier judged again may halt again, and a person may pause it anew.
func (s *Store) ActOnPlan(ctx context.Context, actor string, id int64, action string, seen models.PlanSeen) (*models.PlanView, error) {
	var out *models.PlanView
	err := s.write(ctx, func(tx *Tx) error {
		var p models.Plan
		q := tx.DB
		if s.dialect == Postgres {
			// One act on a plan at a time, and none while a worker steps it
			// (two resumes of a paused plan both went through).
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		if err := q.Where("id = ?", id).First(&p).Error; err != nil {
			return fmt.Errorf("plan %d: %w", id, mapErr(err))
		}
		// A plan that ended is said ended below (done, so not resumed),
		// not "moved on" from a tier it is still at.
		live := p.State == models.PlanRunning || p.State == models.PlanPaused || p.State == models.PlanHalted
		if seen.Tier != nil || seen.Moves != nil {
			var tiers int64
			if err := tx.Model(&models.PlanStep{}).Select("COALESCE(MAX(tier), 0) + 1").Where("plan_id = ?", p.ID).Scan(&tiers).Error; err != nil {
				return err
			}
			now := fmt.Sprintf("it is now %s at %s", strings.ReplaceAll(p.State, "_", " "), models.TierWords(p.Tier, tiers, p.State == models.PlanDone))
			if p.Reason != "" {
				now += " (" + p.Reason + ")"
			}
			switch {
			case seen.Tier != nil && (*seen.Tier < 0 || *seen.Tier >= tiers):
				return models.Invalid("tier", fmt.Sprintf("plan %d has no tier %s: its tiers are 1 to %d", id, new(big.Int).Add(big.NewInt(*seen.Tier), big.NewInt(1)), tiers))
			case !live:
			case seen.Tier != nil && *seen.Tier != p.Tier:
				return fmt.Errorf("%w: plan %d has moved on since it was read (at %s): %s; nothing was changed: read it again and act on what it is now",
					models.ErrConflict, id, models.TierWords(*seen.Tier, tiers, false), now)
			case seen.Moves != nil && *seen.Moves != p.Moves:
				return fmt.Errorf("%w: plan %d has changed since it was read: %s; nothing was changed: read it again and act on what it is now",
					models.ErrConflict, id, now)
			}
		}
		to, ok := models.PlanMove(action, p.State)
		if !ok {
			verb := action + " it"
			if action == "rollback" {
				verb = "roll it back"
			}
			if action == "rollback" && p.State == models.PlanDone {
				// Done is done: going back is a choice of build, made as
				// any other (the plan's machines keep what it gave them).
				var mod struct {
					Name   string
					Before *int64
				}
				if err := tx.Raw("SELECT name, (SELECT MAX(number) FROM builds WHERE module_id = modules.id AND number < ? AND state IN (?, '')) AS before "+
					"FROM modules WHERE id = ?", p.Build, models.BuildReady, p.ModuleID).Scan(&mod).Error; err != nil {
					return err
				}
				before := "BUILD"
				if mod.Before != nil {
					before = strconv.FormatInt(*mod.Before, 10)
				}
				return fmt.Errorf("%w: plan %d is done; a finished plan is not rolled back: make the build before it current again, with a reason "+
					"(meshctl modules current %s %s --reason …, POST /api/v1/modules/%s/current, or the dashboard's Modules page), or pin a machine to it with a reason "+
					"(meshctl assign MACHINE %s@%s --reason …)", models.ErrConflict, id, mod.Name, before, mod.Name, mod.Name, before)
			}
			why := ""
			if can := models.PlanActions(p.State); len(can) > 0 && action != "rollback" {
				why = fmt.Sprintf(" (a %s plan may be: %s)", strings.ReplaceAll(p.State, "_", " "), strings.Join(can, ", "))
			}
			if action == "rollback" && (p.State == models.PlanRunning || p.State == models.PlanPaused) {
				// Rollback is from halted: say how to get there.
				why = ": only a halted plan is rolled back; cancel it (its build is taken back from the machines that have not applied it), " +
					"or pin a machine to the build before with a reason"
			}
			return fmt.Errorf("%w: plan %d is %s; cannot %s%s", models.ErrConflict, id, strings.ReplaceAll(p.State, "_", " "), verb, why)
		}
		up := map[string]any{"state": to}
		switch {
		case action == models.PlanPause:
			// Who paused it, on the plan itself (it said nothing; only the
			// audit log knew).
			up["reason"] = "paused by " + actor
		case action == "resume" && p.State == models.PlanPaused && !strings.HasPrefix(p.Reason, models.UntriedTierPause):
			up["reason"] = ""
		case to == models.PlanCancelled:
			up["finished_at"], up["reason"] = s.Now(), "cancelled by "+actor
			if err := cancelHostStep(tx, actor, &p); err != nil {
				return err
			}
			withdrawn, err := withdrawUnapplied(tx, &p, "cancelled")
			if err != nil {
				return err
			}
			if withdrawn > 0 {
				up["reason"] = fmt.Sprintf("cancelled by %s; its target removed from %d machine(s) whose hosts had not applied it", actor, withdrawn)
			}
		case action == "resume" && p.State == models.PlanPaused && strings.HasPrefix(p.Reason, models.UntriedTierPause):
			// A person chose to go on past a tier none of whose machines
			// took the build: the next tier is reached.
			up["reason"], up["tier"] = "", p.Tier+1
			p.Tier++
		case action == "resume" && p.State == models.PlanHalted:
			// Re-evaluated from now: the failed steps of its tier are
			// judged again, their deadline restarted, each on its
			// machine's generation now — the one that failed may never
			// have been composed (a variable missing, set since: a new
			// generation, which carries the plan's build).
			up["finished_at"], up["reason"] = nil, ""
			if err := tx.Model(&models.PlanStep{}).Where("plan_id = ? AND state = ?", p.ID, models.StepFailed).
				Updates(map[string]any{"state": models.StepSent, "reason": "", "finished_at": nil, "started_at": s.Now(),
					"generation": gorm.Expr("COALESCE((SELECT generation FROM machines WHERE machines.id = plan_steps.machine_id), plan_steps.generation)")}).Error; err != nil {
				return err
			}
		case to == models.PlanRolledBack:
			reason, err := rollbackPlan(tx, &p, actor)
			if err != nil {
				return err
			}
			up["finished_at"], up["reason"] = s.Now(), reason
		}
		if err := tx.Model(&p).Updates(up).Error; err != nil {
			return err
		}
		p.State = to
		// On the module's record, as the plan's creation, halt and end
		// are: one target tells a plan's whole story.
		var module string
		if err := tx.Raw("SELECT name FROM modules WHERE id = ?", p.ModuleID).Scan(&module).Error; err != nil {
			return err
		}
		detail := fmt.Sprintf("plan %d: %s", id, to)
		if r, ok := up["reason"].(string); ok && r != "" {
			detail += ": " + r
		}
		if err := audit(tx, actor, action+"-plan", "module/"+module, detail); err != nil {
			return err
		}
		if err := stepPlan(tx, &p); err != nil {
			return err
		}
		var err error
		out, err = planViewAfterMoves(tx, &p)
		return err
	})
	return out, err
}

// supersedeOlder ends the module's older plans that have not finished
// (running, paused, or halted) as overtaken by p, and takes their build
// back from the machines whose hosts have not applied it, as a cancel
// does. A plan of p's own build is overtaken too: a build's upload makes a
// plan by itself, and one made by hand for it after (the README's way to
// roll a host release out first) left that one live, halted for good on a
// host that could not take the build, a rollback still offered. A halted one was left live: a person's rollback of it after p had
// moved its machines on pinned them to the build before it, below p's, and
// its resume judged its canary by p's build and sent the build p replaced
// to its next tier. And a target of a plan no longer running was still
// composed: a machine it had reached but not moved kept being sent its
// build once p was cancelled before reaching it.
func supersedeOlder(tx *Tx, p *models.Plan, now time.Time) error {
	_, err := supersedeBelow(tx, p.ModuleID, p.Build+1, fmt.Sprintf("superseded by plan %d for build %d", p.ID, p.Build), now, p.ID)
	return err
}

// supersedeBelow ends the module's plans of builds older than build that
// may still reach machines (running, paused, halted), but the plan
// keep, saying why; it returns their ids.
func supersedeBelow(tx *Tx, moduleID, build int64, why string, now time.Time, keep int64) ([]int64, error) {
	var older []models.Plan
	if err := tx.Where("module_id = ? AND build < ? AND state IN ? AND id <> ?", moduleID, build,
		[]string{models.PlanRunning, models.PlanPaused, models.PlanHalted}, keep).Order("id").Find(&older).Error; err != nil {
		return nil, err
	}
	ids := make([]int64, 0, len(older))
	for i := range older {
		why := why
		n, err := withdrawUnapplied(tx, &older[i], "superseded")
		if err != nil {
			return nil, err
		}
		if n > 0 {
			why += fmt.Sprintf("; its target removed from %d machine(s) whose hosts had not applied it", n)
		}
		if err := tx.Model(&older[i]).Updates(map[string]any{"state": models.PlanSuperseded, "finished_at": now, "reason": why}).Error; err != nil {
			return nil, err
		}
		ids = append(ids, older[i].ID)
	}
	return ids, nil
}

// withdrawUnapplied takes a cancelled plan's build back from the machines
// it was sent to whose hosts have not applied it (offline, or failing to):
// their target from this plan is removed (a new generation), so a host
// that comes back later is not given a build its plan was cancelled for.
// A machine that applied it keeps it (never an older build), and so does
// one whose host held the declaration already and applies it meanwhile:
// composing never names a build older than what a machine runs. So the
// step says its target was removed, not that the build is gone.
//
// A host "applied it" when it applied the step's generation (or a later
// one) and reports running the plan's build, as a step is judged applied
// (models.JudgeStep): a generation held back (its host decodes too old a
// schema) carried the build before, and a person's pin made since named
// another. A host that runs nothing of the module (a build of no
// resources) applied it if it applied the step's own generation, not held
// back: judged by what it runs, a build that removed every file of the
// module was taken back from a host that had applied it, its files put
// back. (A later generation may not name the module at all: one made by
// taking it away counted, and the module given back, the machine was
// composed the ended plan's build.) A sent step whose host did apply it says so
// (applied), where it said "sent", awaiting a report its host had given,
// for good.
func withdrawUnapplied(tx *Tx, p *models.Plan, how string) (int, error) {
	var module string
	if err := tx.Raw("SELECT name FROM modules WHERE id = ?", p.ModuleID).Scan(&module).Error; err != nil {
		return 0, err
	}
	// A step withdrawn before (its machine lost the module, was pinned or
	// revoked) kept its target: the module given back, the machine was
	// composed the ended plan's build. Its target goes (the machine's
	// next generation, made by what moves it again, composes without it).
	if err := tx.Where("plan_id = ? AND module_id = ? AND machine_id IN (?)", p.ID, p.ModuleID,
		tx.Model(&models.PlanStep{}).Select("machine_id").Where("plan_id = ? AND state = ?", p.ID, models.StepWithdrawn)).
		Delete(&models.MachineTarget{}).Error; err != nil {
		return 0, err
	}
	var rows []struct {
		MachineID         int64
		State             string
		Generation        int64
		AppliedGeneration int64
		Running           string
		Assigned          bool
	}
	if err := tx.Table("plan_steps").Joins("JOIN machines ON machines.id = plan_steps.machine_id").
		Select("plan_steps.machine_id, plan_steps.state, plan_steps.generation, machines.applied_generation, machines.running, "+
			"EXISTS (SELECT 1 FROM assignments WHERE assignments.machine_id = machines.id AND assignments.module_id = ?) AS assigned", p.ModuleID).
		Where("plan_steps.plan_id = ? AND plan_steps.state IN ?", p.ID, []string{models.StepSent, models.StepFailed}).
		Order("plan_steps.machine_id").Scan(&rows).Error; err != nil {
		return 0, err
	}
	var ids, took []int64
	for _, r := range rows {
		// A machine the module was taken from runs nothing of it, whatever
		// it applied: given back, it is to get the module's current build.
		ran := r.AppliedGeneration >= r.Generation && r.Assigned
		if ran {
			m := models.Machine{Running: r.Running}
			running, _ := m.RunningBuilds()
			if b, ok := running[module]; ok {
				ran = b.Build >= p.Build
			} else {
				var n int64
				if err := tx.Table("reports").Joins("JOIN declarations ON declarations.machine_id = reports.machine_id AND declarations.generation = reports.generation").
					Where("reports.machine_id = ? AND reports.outcome = ? AND reports.send_id <> '' AND reports.generation = ? AND declarations.held_back = ''",
						r.MachineID, models.OutcomeApplied, r.Generation).Count(&n).Error; err != nil {
					return 0, err
				}
				ran = n > 0
			}
		}
		switch {
		case !ran:
			ids = append(ids, r.MachineID)
		case r.State == models.StepSent:
			took = append(took, r.MachineID)
		}
	}
	now := tx.s.Now()
	if err := inChunks(took, 500, func(chunk []int64) error {
		return tx.Model(&models.PlanStep{}).Where("plan_id = ? AND machine_id IN ?", p.ID, chunk).
			Updates(map[string]any{"state": models.StepApplied, "finished_at": now,
				"reason": fmt.Sprintf("its host applied build %d before the plan was %s; its health not judged after", p.Build, how)}).Error
	}); err != nil {
		return 0, err
	}
	err := inChunks(ids, 500, func(chunk []int64) error {
		var targeted []int64
		if err := tx.Model(&models.MachineTarget{}).Where("plan_id = ? AND module_id = ? AND machine_id IN ?", p.ID, p.ModuleID, chunk).Order("machine_id").
			Pluck("machine_id", &targeted).Error; err != nil {
			return err
		}
		if len(targeted) > 0 {
			if err := tx.Where("plan_id = ? AND module_id = ? AND machine_id IN ?", p.ID, p.ModuleID, targeted).Delete(&models.MachineTarget{}).Error; err != nil {
				return err
			}
			if err := bumpGenerations(tx, targeted, models.TriggerPlan); err != nil {
				return err
			}
		}
		// A failed step keeps why it failed after the new words: the
		// cancel is often its answer, and the why was the plan's record.
		why := "the plan was " + how + " before its host applied the build: its target removed, so its next generation names the module's current build again " +
			"(a host that held the declaration may still apply it; it keeps it only if its report of that comes before that generation is composed, " +
			"and its module has not gone back from that build)"
		// A machine whose target is no longer this plan's (a newer plan
		// reached it in the same act) is not moved by it.
		other := "the plan was " + how + " before its host applied the build; its target was another plan's by then, which it follows"
		step := tx.Model(&models.PlanStep{}).Where("plan_id = ? AND machine_id IN ?", p.ID, chunk)
		return step.Updates(map[string]any{"state": models.StepWithdrawn, "finished_at": now,
			"reason": gorm.Expr("CASE WHEN machine_id IN (SELECT machine_id FROM machine_targets WHERE module_id = ? AND plan_id <> ?) THEN ? WHEN reason = '' THEN ? ELSE ? || '; before: ' || reason END",
				p.ModuleID, p.ID, other, why, why)}).Error
	})
	return len(ids), err
}

// rollbackPlan pins every machine the plan reached to the build it ran
// before, with the reason on each pin; a machine that ran no earlier build
// is named and left as it is. It is a recorded pin by a person, never a
// plan's side effect: "never send an older build" holds.
func rollbackPlan(tx *Tx, p *models.Plan, actor string) (string, error) {
	// One plan decision per module at a time, as CreatePlan takes it: a
	// plan created meanwhile through another instance read the
	// assignments before this rollback's pins were committed, and reached
	// a machine its pin then held on the older build, waiting on a build
	// it was never sent.
	var mod models.Module
	q := tx.DB
	if tx.s.dialect == Postgres {
		q = q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	if err := q.Where("id = ?", p.ModuleID).First(&mod).Error; err != nil {
		return "", err
	}
	var steps []models.PlanStep
	if err := tx.Where("plan_id = ? AND state IN ?", p.ID, []string{models.StepSent, models.StepApplied, models.StepFailed}).
		Order("machine_id").Find(&steps).Error; err != nil {
		return "", err
	}
	var pinned []int64
	var left []string // what the rollback did otherwise than pin the build before
	why := fmt.Sprintf("rollback of plan %d", p.ID)
	for _, st := range steps {
		var m models.Machine
		// Locked as a person's edit locks it: read without, a pin a person
		// made meanwhile (committed after this read of the assignment and
		// before its write) was written over, the person told it was saved.
		q := tx.DB
		if tx.s.dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		err := q.Select("id", "name").Where("id = ?", st.MachineID).First(&m).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			left = append(left, st.MachineName+" was deleted")
			continue
		}
		if err != nil {
			return "", err
		}
		if st.PreviousBuild <= 0 {
			left = append(left, m.Name+" ran no earlier build and is left as it is")
			continue
		}
		// A person's pin made since the plan reached the machine wins, as
		// it does over the plan's steps: the rollback wrote over it, its
		// reason lost.
		var a models.Assignment
		if err := tx.Where("machine_id = ? AND module_id = ?", m.ID, p.ModuleID).First(&a).Error; err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
			return "", err
		}
		if a.Build != nil && a.PinPlan == 0 {
			left = append(left, fmt.Sprintf("%s is pinned by a person to build %d (%s) and is left as it is", m.Name, *a.Build, a.Reason))
			continue
		}
		prev := st.PreviousBuild
		if back := mod.Back(); mod.CurrentBuild != nil && back.Covers(prev) && prev > *mod.CurrentBuild {
			// The build before the plan is one the module went back
			// from: the rollback does not pin it there again.
			left = append(left, fmt.Sprintf("%s ran build %d before, which the module went back from: pinned to the current build %d", m.Name, prev, *mod.CurrentBuild))
			prev = *mod.CurrentBuild
		}
		if err := tx.Model(&models.Assignment{}).Where("machine_id = ? AND module_id = ?", m.ID, p.ModuleID).
			Updates(map[string]any{"build": prev, "reason": why, "pin_plan": p.ID}).Error; err != nil {
			return "", err
		}
		if err := audit(tx, actor, "pin", "machine/"+m.Name, fmt.Sprintf("%s: build %d", why, prev)); err != nil {
			return "", err
		}
		pinned = append(pinned, m.ID)
	}
	// The plan's act made these generations, as its steps and its
	// cancel's withdrawals did ("assignment" read as a person's edit).
	if err := bumpGenerations(tx, pinned, models.TriggerPlan); err != nil {
		return "", err
	}
	reason := fmt.Sprintf("rolled back by %s: %d machine(s) pinned to the build each ran before", actor, len(pinned))
	if len(left) > 0 {
		reason += "; " + strings.Join(left, "; ")
	}
	return reason, nil
}
