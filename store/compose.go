package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm/clause"

	"mesh/models"
)

// Signer signs declaration payloads.
type Signer interface {
	KeyID() string
	Sign(payload []byte) []byte
}

// Composed is the one declaration of a machine at a generation, ready to send.
type Composed struct {
	MachineID  int64
	Machine    string
	Generation int64
	Digest     string
	Envelope   []byte
	Trigger    string
}

// composeChunk bounds the machines composed in one transaction: a few
// queries per chunk, never one per machine.
const composeChunk = 500

// Compose returns the declaration of each machine at its current generation,
// composing and storing those not yet composed. A declaration is stored once
// per (machine, generation) under a unique key: an insert that loses a race
// with another instance reads the winner's, so every send of a generation
// carries the same bytes. Machines that cannot be composed (a variable
// missing, a machine in conflict) are in the error map.
func (s *Store) Compose(ctx context.Context, ids []int64, by string, signer Signer) (map[int64]*Composed, map[int64]error, error) {
	out := make(map[int64]*Composed, len(ids))
	fails := map[int64]error{}
	err := inChunks(ids, composeChunk, func(chunk []int64) error {
		for attempt := 1; ; attempt++ {
			err := s.write(ctx, func(tx *Tx) error {
				if s.dialect == Postgres {
					// One snapshot for every read: the content read is
					// exactly that of the generation read, with no row
					// locks taken on the machines.
					if err := tx.Exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").Error; err != nil {
						return err
					}
				}
				return composeTx(tx, chunk, by, signer, out, fails)
			})
			// Another instance stored one of these generations after this
			// snapshot began: compose again; the retry reads its row.
			if isSerialization(err) && attempt < 5 {
				continue
			}
			return err
		}
	})
	return out, fails, err
}

// isSerialization reports a PostgreSQL serialization failure (SQLSTATE 40001).
func isSerialization(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40001"
}

func composeTx(tx *Tx, ids []int64, by string, signer Signer, out map[int64]*Composed, fails map[int64]error) error {
	s := tx.s
	// Every read below sees one state of the store: SQLite's immediate
	// transaction excludes writers; PostgreSQL's repeatable-read snapshot
	// (see Compose) sees a bump and the change it came with together or
	// not at all. So the content read is exactly that of the generation read.
	var ms []models.Machine
	if err := tx.Where("id IN ?", ids).Order("id").Find(&ms).Error; err != nil {
		return err
	}
	if err := readComposed(tx, ids, out); err != nil {
		return err
	}
	var todo []models.Machine
	for _, m := range ms {
		if c, ok := out[m.ID]; ok && c.Generation == m.Generation {
			continue
		}
		delete(out, m.ID)
		if m.Conflict {
			fails[m.ID] = fmt.Errorf("%w: machine %s waits for an admin to resolve it", models.ErrMachineConflict, m.Name)
			continue
		}
		todo = append(todo, m)
	}
	if len(todo) == 0 {
		return nil
	}
	todoIDs := make([]int64, len(todo))
	for i, m := range todo {
		todoIDs[i] = m.ID
	}

	var vars []models.MachineVariable
	if err := tx.Where("machine_id IN ?", todoIDs).Find(&vars).Error; err != nil {
		return err
	}
	varsOf := map[int64]map[string]string{}
	for _, v := range vars {
		if varsOf[v.MachineID] == nil {
			varsOf[v.MachineID] = map[string]string{}
		}
		varsOf[v.MachineID][v.Key] = v.Value
	}
	var as []models.Assignment
	if err := tx.Where("machine_id IN ?", todoIDs).Find(&as).Error; err != nil {
		return err
	}
	modIDs := map[int64]bool{}
	for _, a := range as {
		modIDs[a.ModuleID] = true
	}
	mods := map[int64]models.Module{}
	builds := map[[2]int64]models.Build{}
	planTargets := map[[2]int64]int64{}
	if len(modIDs) > 0 {
		var list []models.Module
		if err := tx.Where("id IN ?", keysOf(modIDs)).Find(&list).Error; err != nil {
			return err
		}
		for _, m := range list {
			mods[m.ID] = m
		}
		// The builds any machine could get: pins, currents and what they
		// run. Loaded for the whole set at once.
		nums := map[int64]bool{}
		for _, a := range as {
			if a.Build != nil {
				nums[*a.Build] = true
			}
		}
		for _, m := range list {
			if m.CurrentBuild != nil {
				nums[*m.CurrentBuild] = true
			}
		}
		for _, m := range todo {
			for _, r := range parseRunning(m.Running) {
				nums[r.Build] = true
			}
		}
		var targets []models.MachineTarget
		if err := tx.Where("machine_id IN ?", todoIDs).Find(&targets).Error; err != nil {
			return err
		}
		for _, t := range targets {
			nums[t.Build] = true
			planTargets[[2]int64{t.MachineID, t.ModuleID}] = t.Build
		}
		var bl []models.Build
		if err := tx.Where("module_id IN ? AND number IN ?", keysOf(modIDs), keysOf(nums)).Find(&bl).Error; err != nil {
			return err
		}
		for _, b := range bl {
			builds[[2]int64{b.ModuleID, b.Number}] = b
		}
	}
	asOf := map[int64][]models.Assignment{}
	for _, a := range as {
		asOf[a.MachineID] = append(asOf[a.MachineID], a)
	}

	parsed := map[int64]*models.Manifest{}
	for _, b := range builds {
		if m, err := models.ParseManifest([]byte(b.Manifest)); err == nil {
			parsed[b.ID] = m
		}
	}
	releases, hostDef, err := releasesFor(tx, todo)
	if err != nil {
		return err
	}
	now := s.Now()
	rows := make([]models.Declaration, 0, len(todo))
	payloads := make([][]byte, 0, len(todo))
	for _, m := range todo {
		in := models.ComposeInput{Machine: m.Name, Generation: m.Generation, EmptyOK: m.EmptyOK,
			ComposedAt: now, ComposedBy: by, Variables: varsOf[m.ID]}
		target := m.TargetHostVersion
		if target == "" {
			target = hostDef
		}
		if rel := releases[target+" "+m.OS+"/"+m.Arch]; rel != nil {
			in.Host = rel.Wire()
		}
		running := parseRunning(m.Running)
		var err error
		for _, a := range asOf[m.ID] {
			mod := mods[a.ModuleID]
			var target *int64
			if t, ok := planTargets[[2]int64{m.ID, mod.ID}]; ok && (mod.CurrentBuild == nil || t >= *mod.CurrentBuild) {
				target = &t // never older than the current build either
			}
			n, ok := models.ChooseBuild(a.Build, a.Reason, target, mod.CurrentBuild, running[mod.Name].Build)
			if !ok {
				continue // a module with no build yet declares nothing
			}
			b, found := builds[[2]int64{mod.ID, n}]
			if !found {
				err = fmt.Errorf("module %s build %d: %w", mod.Name, n, models.ErrNotFound)
				break
			}
			in.Modules = append(in.Modules, models.ComposeModule{Name: mod.Name, Build: b.Number, Digest: b.Digest,
				Size: b.Size, Manifest: b.Manifest, Parsed: parsed[b.ID]})
		}
		var p *models.DeclarationPayload
		if err == nil {
			p, err = models.ComposePayload(in)
		}
		var payload []byte
		if err == nil {
			payload, err = json.Marshal(p)
		}
		if err != nil {
			fails[m.ID] = err
			continue
		}
		payloads = append(payloads, payload)
		rows = append(rows, models.Declaration{MachineID: m.ID, Generation: m.Generation,
			Digest: models.DigestOf(payload), Artifacts: strings.Join(p.Artifacts(), " "),
			Trigger: m.GenerationTrigger, ComposedBy: by, ComposedAt: now})
	}
	if err := sign(rows, payloads, signer); err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	res := tx.Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(&rows, s.batchRows(9))
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == int64(len(rows)) {
		// Every row is ours: no other instance composed these generations.
		names := make(map[int64]string, len(todo))
		for _, m := range todo {
			names[m.ID] = m.Name
		}
		for _, r := range rows {
			out[r.MachineID] = &Composed{MachineID: r.MachineID, Machine: names[r.MachineID], Generation: r.Generation,
				Digest: r.Digest, Envelope: r.Envelope, Trigger: r.Trigger}
		}
		return nil
	}
	// Another instance won some: read what is stored, theirs and ours.
	return readComposed(tx, todoIDs, out)
}

// readComposed reads the stored declarations of machines at their current generation.
func readComposed(tx *Tx, ids []int64, out map[int64]*Composed) error {
	var rows []struct {
		models.Declaration
		Name string
	}
	err := tx.Table("declarations").
		Select("declarations.*, machines.name AS name").
		Joins("JOIN machines ON machines.id = declarations.machine_id AND machines.generation = declarations.generation").
		Where("declarations.machine_id IN ?", ids).Scan(&rows).Error
	if err != nil {
		return err
	}
	for _, r := range rows {
		out[r.MachineID] = &Composed{MachineID: r.MachineID, Machine: r.Name, Generation: r.Generation,
			Digest: r.Digest, Envelope: r.Envelope, Trigger: r.Trigger}
	}
	return nil
}

// Declaration reads the stored declaration of (machine, generation).
func (s *Store) Declaration(ctx context.Context, machineID, generation int64) (*models.Declaration, error) {
	var d models.Declaration
	if err := s.db.WithContext(ctx).Where("machine_id = ? AND generation = ?", machineID, generation).First(&d).Error; err != nil {
		return nil, mapErr(err)
	}
	return &d, nil
}

func parseRunning(s string) map[string]models.RunningBuild {
	r := map[string]models.RunningBuild{}
	_ = json.Unmarshal([]byte(s), &r)
	return r
}

// sign signs and wraps every payload, spread over the CPUs: signing is
// most of composing's cost in a fan-out.
func sign(rows []models.Declaration, payloads [][]byte, signer Signer) error {
	workers := min(runtime.GOMAXPROCS(0), max(1, len(rows)/32))
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(rows); i += workers {
				env, err := json.Marshal(models.Envelope{Payload: payloads[i],
					Signatures: []models.Signature{{KeyID: signer.KeyID(), Sig: signer.Sign(payloads[i])}}})
				if err != nil {
					errs[w] = err
					return
				}
				rows[i].Envelope = env
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func keysOf(m map[int64]bool) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
