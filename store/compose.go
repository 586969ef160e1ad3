package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"mesh/models"
)

// composeChunk bounds the machines composed at once: a few queries per
// chunk, never one per machine.
const composeChunk = 500

// Compose returns the declaration of each machine at its current generation,
// composing and storing those not yet composed. A declaration is stored once
// per (machine, generation) under a unique key: an insert that loses a race
// with another instance reads the winner's, so every send of a generation
// carries the same bytes. Machines that cannot be composed (a variable
// missing, a machine in conflict) are in the error map, as *models.ComposeError.
//
// Composing is three steps: read a consistent snapshot, compose and sign
// outside any transaction, then insert in a short write transaction. The
// write lock (SQLite's above all) is held only for the insert, so several
// chunks compose at once and sends are committed between them.
func (s *Store) Compose(ctx context.Context, ids []int64, by string, signer models.Signer) (map[int64]*models.Composed, map[int64]error, error) {
	return s.ComposeFor(ctx, ids, by, signer, nil)
}

// ComposeFor is Compose that also signs the single-signature envelope of
// the machines in single (those whose hosts do not verify batch
// envelopes) as it composes them, rather than on their first poll.
func (s *Store) ComposeFor(ctx context.Context, ids []int64, by string, signer models.Signer, single map[int64]bool) (map[int64]*models.Composed, map[int64]error, error) {
	return s.ComposeAndSend(ctx, ids, by, signer, single, nil)
}

// SendsFor makes the send rows of polls answered with a chunk's
// declarations, inside the transaction that stores them: it is given the
// chunk's machines and their declarations as that transaction will commit
// them (composed now, or stored before by this instance or another; nil
// for a machine with none, or one removed meanwhile). It may be run again
// (a retried transaction), so it keeps no state of its own between runs.
type SendsFor func(chunk []int64, composed func(id int64) *models.Composed) []models.Send

// ComposeAndSend is ComposeFor that also writes, in each chunk's write
// transaction, the send rows sends makes: the polls woken by a fan-out are
// answered once that one commit is done, rather than after a second
// transaction of their own (a commit and two hand-offs fewer a machine).
// A chunk whose declarations were all stored before still writes its send
// rows. With sends, ids are one chunk whatever their number, so an error
// means nothing of theirs was written; either way the declarations it
// returns are only ever ones the store holds.
func (s *Store) ComposeAndSend(ctx context.Context, ids []int64, by string, signer models.Signer, single map[int64]bool, sends SendsFor) (map[int64]*models.Composed, map[int64]error, error) {
	out := make(map[int64]*models.Composed, len(ids))
	fails := map[int64]error{}
	size := composeChunk
	if sends != nil {
		size = max(len(ids), 1)
	}
	err := inChunks(ids, size, func(chunk []int64) error {
		var in composeInput
		if err := s.snapshot(ctx, func(tx *Tx) error { return readCompose(tx, chunk, out, fails, &in) }); err != nil {
			return err
		}
		rows, names := in.compose(s.Now(), by, fails)
		stored := func(id int64) *models.Composed { return out[id] }
		if len(rows) == 0 && (sends == nil || len(sends(chunk, stored)) == 0) {
			return nil
		}
		if len(rows) > 0 {
			if err := seal(rows, signer, single); err != nil {
				return err
			}
		}
		if s.beforeStore != nil {
			s.beforeStore()
		}
		if err := s.prepareInserts(ctx, declInsert, sendInsert); err != nil {
			return mapErr(err)
		}
		// What an attempt composed joins out only once it has committed:
		// a declaration of a transaction rolled back was never stored, and
		// a poll sent it would carry bytes no other send of its generation
		// has.
		var got map[int64]*models.Composed
		var present map[int64]bool // nil: not looked at
		attempt := func(look bool) func(tx *Tx) error {
			return func(tx *Tx) error {
				got = make(map[int64]*models.Composed, len(chunk))
				if look {
					var err error
					if present, err = machinesPresent(tx, chunk); err != nil {
						return err
					}
				}
				rows := rows
				if present != nil {
					rows = slices.DeleteFunc(slices.Clone(rows), func(r composedRow) bool { return !present[r.MachineID] })
				}
				if len(rows) > 0 {
					if err := storeComposed(tx, rows, names, in.epoch, got); err != nil {
						return err
					}
				}
				if sends == nil {
					return nil
				}
				return insertSendsIn(tx, sends(chunk, func(id int64) *models.Composed {
					if present != nil && !present[id] {
						return nil
					}
					if c := got[id]; c != nil {
						return c
					}
					return out[id]
				}))
			}
		}
		err := s.write(ctx, attempt(false))
		if s.dialect == SQLite && foreignKeyFailed(err) {
			// A machine removed since the snapshot (SQLite keeps the keys
			// of declarations and sends): the chunk is written again
			// without it, rather than failing every machine of it.
			err = s.write(ctx, attempt(true))
		}
		if err != nil {
			return err
		}
		maps.Copy(out, got)
		for _, id := range chunk {
			if present != nil && !present[id] {
				delete(out, id) // what the snapshot said of a machine since removed
			}
		}
		return nil
	})
	return out, fails, err
}

// snapshot runs fn in a read-only transaction that sees one state of the
// store: PostgreSQL's repeatable-read snapshot, SQLite's deferred read
// transaction (under WAL, a snapshot taken at its first read). A bump and
// the change it came with are seen together or not at all, so the content
// read is exactly that of the generation read, with no locks taken.
func (s *Store) snapshot(ctx context.Context, fn func(tx *Tx) error) error {
	opts := &sql.TxOptions{ReadOnly: true}
	if s.dialect == Postgres {
		opts.Isolation = sql.LevelRepeatableRead
	}
	return mapErr(s.db.WithContext(ctx).Transaction(func(db *gorm.DB) error {
		return fn(&Tx{DB: db, s: s})
	}, opts))
}

// composeInput is what one snapshot says of the machines to compose.
type composeInput struct {
	todo   []models.Machine
	varsOf map[int64]map[string]string
	asOf   map[int64][]models.Assignment
	mods   map[int64]models.Module
	builds map[[2]int64]models.Build
	// parts are each build's manifest, parsed once, with the resources
	// every machine of the batch shares (by build; none when a manifest
	// does not parse: composing a machine of it says why).
	parts       map[int64]*models.SharedParts
	planTargets map[[2]int64]int64
	releases    map[string]*models.Release
	hostDef     string
	// epoch is the retention epoch the snapshot saw (PostgreSQL).
	epoch int64
	// applied is what a machine whose host does not decode every schema
	// applied, newest first: the content a held-back declaration carries
	// (readApplied).
	applied map[int64][]*models.DeclarationPayload
	// decoders is, per os/arch of those machines, the ready host releases
	// that decode more than schema 1, newest first: the release a
	// held-back reason names.
	decoders map[string][]models.Release
	// running is what each machine reports running, decoded once for
	// both the builds to read and composing (in todo's order).
	running []runningOf
}

// runningOf is a machine's running builds, or why they do not decode.
type runningOf struct {
	builds map[string]models.RunningBuild
	err    error
}

// readCompose reads, in one snapshot, the declarations already stored for
// the machines' current generations (into out) and everything needed to
// compose the others (into in).
func readCompose(tx *Tx, ids []int64, out map[int64]*models.Composed, fails map[int64]error, in *composeInput) error {
	ms, err := composeMachines(tx, ids)
	if err != nil {
		return err
	}
	if err := readComposed(tx, ms, out); err != nil {
		return err
	}
	// Filtered in place: a machine is ~0.5 KiB, and a slice grown by
	// appending copied each chunk's twice over.
	todo := ms[:0]
	for _, m := range ms {
		if c, ok := out[m.ID]; ok && c.Generation == m.Generation {
			continue
		}
		delete(out, m.ID)
		if m.Conflict {
			fails[m.ID] = &models.ComposeError{Generation: m.Generation,
				Err: fmt.Errorf("%w: machine %s waits for an admin to resolve it", models.ErrMachineConflict, m.Name)}
			continue
		}
		todo = append(todo, m)
	}
	in.todo = todo
	if len(todo) == 0 {
		return nil
	}
	in.running = make([]runningOf, len(todo))
	for i := range todo {
		in.running[i].builds, in.running[i].err = todo[i].RunningBuilds()
	}
	if tx.s.dialect == Postgres {
		var err error
		if in.epoch, err = currentEpoch(tx); err != nil {
			return err
		}
	}
	todoIDs := make([]int64, len(todo))
	for i, m := range todo {
		todoIDs[i] = m.ID
	}

	if in.varsOf, err = composeVariables(tx, todoIDs); err != nil {
		return err
	}
	as, err := composeAssignments(tx, todoIDs)
	if err != nil {
		return err
	}
	modIDs := map[int64]bool{}
	for _, a := range as {
		modIDs[a.ModuleID] = true
	}
	in.mods = map[int64]models.Module{}
	in.builds = map[[2]int64]models.Build{}
	in.planTargets = map[[2]int64]int64{}
	if len(modIDs) > 0 {
		var list []models.Module
		if err := tx.Where("id IN ?", keysOf(modIDs)).Find(&list).Error; err != nil {
			return err
		}
		for _, m := range list {
			in.mods[m.ID] = m
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
		for _, r := range in.running {
			for _, b := range r.builds { // undecodable: composing the machine says so below
				nums[b.Build] = true
			}
		}
		var targets []models.MachineTarget
		if err := tx.Where(inID(tx, "machine_id", todoIDs)).Find(&targets).Error; err != nil {
			return err
		}
		for _, t := range targets {
			nums[t.Build] = true
			in.planTargets[[2]int64{t.MachineID, t.ModuleID}] = t.Build
		}
		var bl []models.Build
		if err := tx.Where("module_id IN ? AND number IN ?", keysOf(modIDs), keysOf(nums)).Find(&bl).Error; err != nil {
			return err
		}
		for _, b := range bl {
			in.builds[[2]int64{b.ModuleID, b.Number}] = b
		}
	}
	in.asOf = map[int64][]models.Assignment{}
	for _, a := range as {
		in.asOf[a.MachineID] = append(in.asOf[a.MachineID], a)
	}
	in.parts = map[int64]*models.SharedParts{}
	for _, b := range in.builds {
		if m, err := models.ParseManifest([]byte(b.Manifest)); err == nil {
			in.parts[b.ID] = models.NewSharedParts(m)
		}
	}
	if in.releases, in.hostDef, err = releasesFor(tx, todo); err != nil {
		return err
	}
	if in.applied, err = readApplied(tx, todo); err != nil {
		return err
	}
	in.decoders, err = readDecoders(tx, todo)
	return err
}

// compose builds the payload of every machine read; it returns the rows
// to store (payload not yet signed) and the machines' names.
func (in *composeInput) compose(now time.Time, by string, fails map[int64]error) ([]composedRow, map[int64]string) {
	rows := make([]composedRow, 0, len(in.todo))
	names := make(map[int64]string, len(in.todo))
	for i, m := range in.todo {
		ci := models.ComposeInput{Machine: m.Name, Generation: m.Generation, EmptyOK: m.EmptyOK,
			ComposedAt: now, ComposedBy: by, Variables: in.varsOf[m.ID]}
		target, byDefault := m.TargetHostVersion, m.TargetHostVersion == ""
		if byDefault {
			target = in.hostDef
		}
		targetRel := in.releases[target+" "+m.OS+"/"+m.Arch]
		if byDefault && targetRel != nil && targetRel.RolledOutAt == nil {
			// The default's release for this platform was uploaded after
			// its version became the default: it reaches these machines
			// through a rollout, canary first, never all at once.
			targetRel = nil
		}
		if targetRel != nil {
			ci.Host = targetRel.Wire()
		}
		running, err := in.running[i].builds, in.running[i].err
		for _, a := range in.asOf[m.ID] {
			mod := in.mods[a.ModuleID]
			var target *int64
			if t, ok := in.planTargets[[2]int64{m.ID, mod.ID}]; ok && (mod.CurrentBuild == nil || t >= *mod.CurrentBuild) {
				target = &t // never older than the current build either
			}
			n, ok := models.ChooseBuild(a.Build, a.Reason, target, mod.CurrentBuild, mod.Back(), running[mod.Name].Build)
			if !ok {
				continue // a module with no build yet declares nothing
			}
			b, found := in.builds[[2]int64{mod.ID, n}]
			if !found {
				err = fmt.Errorf("module %s build %d: %w", mod.Name, n, models.ErrNotFound)
				break
			}
			ci.Modules = append(ci.Modules, models.ComposeModule{Name: mod.Name, Build: b.Number, Digest: b.Digest,
				Size: b.Size, Manifest: b.Manifest, Parsed: in.parts[b.ID].Manifest(), Shared: in.parts[b.ID]})
		}
		var p *models.DeclarationPayload
		if err == nil {
			p, err = models.ComposePayload(ci)
		}
		held := ""
		if err == nil {
			p, held, err = in.forHost(m, p, targetRel)
		}
		var payload []byte
		if err == nil {
			payload, err = p.Marshal()
		}
		if err == nil && len(payload) > models.MaxPayload {
			err = models.Invalid("declaration", fmt.Sprintf("%d bytes, over the %d a host takes (a file's content this large belongs in a tree's artifact)", len(payload), models.MaxPayload))
		}
		if err != nil {
			fails[m.ID] = &models.ComposeError{Generation: m.Generation, Err: err}
			continue
		}
		names[m.ID] = m.Name
		rows = append(rows, composedRow{payload: payload, Declaration: models.Declaration{MachineID: m.ID,
			Generation: m.Generation, Digest: models.DigestOf(payload), Artifacts: strings.Join(p.Artifacts(), " "),
			Trigger: m.GenerationTrigger, ComposedBy: by, ComposedAt: now, Schema: p.Schema, HeldBack: held},
			heldBefore: m.HeldBack})
	}
	return rows, names
}

// declInsert is how declarations are inserted on SQLite.
var declInsert = &preparedInsert{table: "declarations", tail: " ON CONFLICT DO NOTHING",
	columns: []string{"machine_id", "generation", "digest", "envelope", "batch", "artifacts", "trigger", "composed_by",
		"composed_at", "schema", "held_back"}}

// composedRow is a declaration row and the payload its envelope signs.
type composedRow struct {
	models.Declaration
	payload    []byte
	heldBefore string // the machine's held-back reason when read
}

// storeComposed inserts the declarations; where another instance stored
// one of these generations first, its row is read and used instead.
//
// On PostgreSQL declarations are partitioned by epoch and the unique key
// (machine, generation) holds only within a partition. The insert takes
// the retention lock shared and reads the epoch under it: two inserts of
// one generation in the same epoch meet on the key; when the epoch has
// moved since the snapshot this chunk was composed from (seen is the
// epoch it saw), the generations are looked up in every partition first,
// so a declaration another instance stored before the epoch moved is
// found and used.
func storeComposed(tx *Tx, rows []composedRow, names map[int64]string, seen int64, out map[int64]*models.Composed) error {
	var epoch int64
	if tx.s.dialect == Postgres {
		if err := lockRetention(tx, false); err != nil {
			return err
		}
		var err error
		if epoch, err = currentEpoch(tx); err != nil {
			return err
		}
		if epoch != seen {
			if rows, err = withoutStored(tx, rows, names, out); err != nil || len(rows) == 0 {
				return err
			}
		}
	}
	decls := make([]models.Declaration, len(rows))
	for i, r := range rows {
		decls[i] = r.Declaration
		decls[i].Schema = int(schemaOf(r.Schema)) // the column's default when unset
	}
	var inserted int64
	var err error
	if tx.s.dialect == Postgres {
		inserted, err = insertDeclarationsPostgres(tx, decls, epoch)
	} else {
		inserted, err = tx.insertPrepared(tx.Statement.Context, declInsert, len(decls), func(i int, args []any) []any {
			d := &decls[i]
			return append(args, d.MachineID, d.Generation, d.Digest, d.Envelope, d.Batch, d.Artifacts, d.Trigger, d.ComposedBy, d.ComposedAt,
				d.Schema, d.HeldBack)
		})
	}
	if err != nil {
		return err
	}
	if err := recordHeldBack(tx, rows); err != nil {
		return err
	}
	if inserted == int64(len(decls)) {
		// Every row is ours: no other instance composed these generations.
		for _, d := range decls {
			out[d.MachineID] = composedOf(d, names[d.MachineID])
		}
		return nil
	}
	// Another instance won some: read what is stored for exactly these
	// (machine, generation) pairs, theirs and ours.
	want := make(map[int64]int64, len(decls))
	ids := make([]int64, 0, len(decls))
	for _, d := range decls {
		want[d.MachineID] = d.Generation
		ids = append(ids, d.MachineID)
	}
	var stored []models.Declaration
	if err := tx.Where("machine_id IN ?", ids).Where("generation IN ?", generationsOf(want)).Find(&stored).Error; err != nil {
		return err
	}
	for _, d := range stored {
		if want[d.MachineID] == d.Generation {
			out[d.MachineID] = composedOf(d, names[d.MachineID])
		}
	}
	return nil
}

// insertDeclarationsPostgres inserts a chunk's declarations in epoch and
// returns how many were new: another instance's of the same generation
// is kept.
//
// The rows are first copied in (COPY, see copyRows), after a savepoint:
// a generation is nearly always composed by one instance only, and
// INSERT … ON CONFLICT DO NOTHING makes every row a speculative
// insertion, confirmed after its index entry (a quarter more of
// PostgreSQL's time for 10,000 rows than a plain insert). Only a unique
// violation — another instance stored one first — rolls back to the
// savepoint and inserts the chunk again with ON CONFLICT DO NOTHING,
// keeping theirs: one statement of twelve parameters, an array per
// column (gorm's multi-row INSERT of the same rows had 6,000 parameters
// for the driver to encode one by one).
func insertDeclarationsPostgres(tx *Tx, ds []models.Declaration, epoch int64) (int64, error) {
	// The column is NOT NULL; a declaration's single envelope is empty
	// until first needed.
	envelope := func(d *models.Declaration) []byte {
		if d.Envelope == nil {
			return []byte{}
		}
		return d.Envelope
	}
	ctx, db := tx.Statement.Context, tx.Statement.ConnPool
	if _, err := db.ExecContext(ctx, "SAVEPOINT declarations_new"); err != nil {
		return 0, err
	}
	inserted, err := tx.copyRows("declarations", declColumns, len(ds), func(i int) []any {
		d := &ds[i]
		return []any{d.MachineID, d.Generation, d.Digest, envelope(d), d.Batch, d.Artifacts, d.Trigger, d.ComposedBy, d.ComposedAt,
			schemaOf(d.Schema), d.HeldBack, epoch}
	})
	if err == nil || !uniqueViolation(err) {
		return inserted, err
	}
	if _, err := db.ExecContext(ctx, "ROLLBACK TO SAVEPOINT declarations_new"); err != nil {
		return 0, err
	}
	n := len(ds)
	machines, generations, schemas := make([]int64, n), make([]int64, n), make([]int64, n)
	digests, artifacts, triggers, bys, held := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	envelopes, batches := make([][]byte, n), make([][]byte, n)
	ats := make([]time.Time, n)
	for i := range ds {
		d := &ds[i]
		machines[i], generations[i], schemas[i] = d.MachineID, d.Generation, schemaOf(d.Schema)
		digests[i], artifacts[i], triggers[i], bys[i], held[i] = d.Digest, d.Artifacts, d.Trigger, d.ComposedBy, d.HeldBack
		envelopes[i], batches[i], ats[i] = envelope(d), d.Batch, d.ComposedAt
	}
	res, err := db.ExecContext(ctx, `INSERT INTO declarations
		(machine_id, generation, digest, envelope, batch, artifacts, trigger, composed_by, composed_at, schema, held_back, epoch)
		SELECT u.machine_id, u.generation, u.digest, u.envelope, u.batch, u.artifacts, u.trigger, u.composed_by, u.composed_at,
			u.schema, u.held_back, $12
		FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bytea[], $5::bytea[], $6::text[], $7::text[], $8::text[],
			$9::timestamptz[], $10::bigint[], $11::text[])
			AS u (machine_id, generation, digest, envelope, batch, artifacts, trigger, composed_by, composed_at, schema, held_back)
		ON CONFLICT DO NOTHING`,
		machines, generations, digests, envelopes, batches, artifacts, triggers, bys, ats, schemas, held, epoch)
	tx.s.statements.Add(1)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// declColumns are the columns a declaration is copied in with (PostgreSQL).
var declColumns = []string{"machine_id", "generation", "digest", "envelope", "batch", "artifacts", "trigger", "composed_by",
	"composed_at", "schema", "held_back", "epoch"}

// uniqueViolation reports PostgreSQL refusing a row whose key another
// row holds (23505).
func uniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// composedOf is a stored declaration of the machine named, as composing
// hands it on.
func composedOf(d models.Declaration, name string) *models.Composed {
	return &models.Composed{MachineID: d.MachineID, Machine: name, Generation: d.Generation, Digest: d.Digest,
		Envelope: d.Envelope, Batch: d.Batch, Trigger: d.Trigger, Schema: d.Schema, HeldBack: d.HeldBack}
}

// withoutStored puts into out the declarations already stored for rows'
// (machine, generation) and returns the rows still to insert.
func withoutStored(tx *Tx, rows []composedRow, names map[int64]string, out map[int64]*models.Composed) ([]composedRow, error) {
	want := make(map[int64]int64, len(rows))
	ids := make([]int64, 0, len(rows))
	for _, r := range rows {
		want[r.MachineID] = r.Generation
		ids = append(ids, r.MachineID)
	}
	var stored []models.Declaration
	if err := tx.Where("machine_id IN ?", ids).Where("generation IN ?", generationsOf(want)).Find(&stored).Error; err != nil {
		return nil, err
	}
	have := map[int64]bool{}
	for _, d := range stored {
		if want[d.MachineID] == d.Generation {
			have[d.MachineID] = true
			out[d.MachineID] = composedOf(d, names[d.MachineID])
		}
	}
	left := rows[:0:0]
	for _, r := range rows {
		if !have[r.MachineID] {
			left = append(left, r)
		}
	}
	return left, nil
}

func generationsOf(m map[int64]int64) []int64 {
	seen := map[int64]bool{}
	for _, g := range m {
		seen[g] = true
	}
	return keysOf(seen)
}

// readComposed reads the declarations stored for the machines ms at the
// generations just read of them, in the same snapshot: one index probe a
// machine, whatever the history each keeps (a join on the machine's
// current generation read every kept declaration of every machine of the
// chunk first, and a machine keeps one a change for the retention period).
func readComposed(tx *Tx, ms []models.Machine, out map[int64]*models.Composed) error {
	if len(ms) == 0 {
		return nil
	}
	names := make(map[int64]string, len(ms))
	ids, gens := make([]int64, len(ms)), make([]int64, len(ms))
	for i, m := range ms {
		ids[i], gens[i], names[m.ID] = m.ID, m.Generation, m.Name
	}
	var query string
	var args []any
	if tx.s.dialect == Postgres {
		query = `SELECT d.* FROM unnest(CAST(? AS bigint[]), CAST(? AS bigint[])) AS u (machine_id, generation)
			JOIN declarations d ON d.machine_id = u.machine_id AND d.generation = u.generation`
		args = []any{int64Array(ids, '{', '}'), int64Array(gens, '{', '}')}
	} else {
		// One JSON object, {"machine": generation, …}; CROSS JOIN keeps it
		// the outer loop, so each pair is one probe of the index.
		b := make([]byte, 0, len(ms)*16+2)
		b = append(b, '{')
		for i := range ids {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = strconv.AppendInt(b, ids[i], 10)
			b = append(b, '"', ':')
			b = strconv.AppendInt(b, gens[i], 10)
		}
		query = `SELECT d.* FROM json_each(?) AS u
			CROSS JOIN declarations d ON d.machine_id = CAST(u.key AS INTEGER) AND d.generation = u.value`
		args = []any{string(append(b, '}'))}
	}
	var rows []models.Declaration
	if err := tx.Raw(query, args...).Scan(&rows).Error; err != nil {
		return err
	}
	for _, d := range rows {
		out[d.MachineID] = composedOf(d, names[d.MachineID])
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

// seal signs the chunk's payloads as one batch: one ed25519 signature
// over the Merkle root of their leaves, and each payload's batch envelope
// with its inclusion proof. The single-signature envelope is signed here
// only for the machines in single, spread over the CPUs; the others' is
// left empty and signed when a host that does not verify batches first
// needs it (SingleEnvelope), so a fleet of hosts that do costs one
// signature per chunk rather than one per machine.
func seal(rows []composedRow, signer models.Signer, single map[int64]bool) error {
	payloads := make([][]byte, len(rows))
	var one []int
	for i := range rows {
		payloads[i] = rows[i].payload
		if single[rows[i].MachineID] {
			one = append(one, i)
		}
	}
	envs, err := models.SealBatch(payloads, signer)
	if err != nil {
		return err
	}
	for i := range rows {
		rows[i].Batch, rows[i].Envelope = envs[i], []byte{}
	}
	workers := min(runtime.GOMAXPROCS(0), max(1, len(one)/32))
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < len(one); k += workers {
				i := one[k]
				if rows[i].Envelope, errs[w] = models.SealOne(rows[i].payload, signer); errs[w] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// SingleEnvelope returns the single-signature envelope of c's (machine,
// generation), the one a host that does not send X-Mesh-Envelope: batch
// verifies. It is signed on first need and stored with the declaration;
// an instance that loses the race to store it reads and returns the
// winner's, so every instance sends the same bytes. The returned copy of
// c carries it.
func (s *Store) SingleEnvelope(ctx context.Context, c *models.Composed, signer models.Signer) (*models.Composed, error) {
	if len(c.Envelope) > 0 {
		return c, nil
	}
	payload, err := models.PayloadOf(c.Batch)
	if err != nil {
		return nil, fmt.Errorf("declaration of machine %s generation %d: %w", c.Machine, c.Generation, err)
	}
	env, err := models.SealOne(payload, signer)
	if err != nil {
		return nil, err
	}
	var stored []byte
	err = s.write(ctx, func(tx *Tx) error {
		where := "machine_id = ? AND generation = ? AND digest = ?"
		if err := tx.Model(&models.Declaration{}).Where(where+" AND envelope = ?", c.MachineID, c.Generation, c.Digest, []byte{}).
			Update("envelope", env).Error; err != nil {
			return err
		}
		var d models.Declaration
		if err := tx.Select("envelope").Where(where, c.MachineID, c.Generation, c.Digest).Order("id").First(&d).Error; err != nil {
			return err
		}
		stored = d.Envelope
		return nil
	})
	if err != nil {
		return nil, mapErr(err)
	}
	if len(stored) == 0 {
		return nil, fmt.Errorf("declaration of machine %s generation %d: no envelope stored", c.Machine, c.Generation)
	}
	out := *c
	out.Envelope = stored
	return &out, nil
}

// SealSingles signs and stores the single-signature envelope of every
// machine's current declaration that was stored with its batch envelope
// only (signed "on first need"): what an instance of a build before batch
// envelopes sends as it is, which for those was an empty body until the
// next change. It returns how many it signed; one signed meanwhile by a
// poll's first need is kept as it is.
func (s *Store) SealSingles(ctx context.Context, signer models.Signer) (int, error) {
	empty := "octet_length(declarations.envelope) = 0"
	if s.dialect == SQLite {
		empty = "length(declarations.envelope) = 0"
	}
	var rows []struct {
		MachineID  int64
		Generation int64
		Digest     string
		Batch      []byte
	}
	if err := s.db.WithContext(ctx).Table("declarations").
		Select("declarations.machine_id, declarations.generation, declarations.digest, declarations.batch").
		Joins("JOIN machines ON machines.id = declarations.machine_id AND machines.generation = declarations.generation").
		Where(empty + " AND length(declarations.batch) > 0").Scan(&rows).Error; err != nil {
		return 0, mapErr(err)
	}
	signed := 0
	for start := 0; start < len(rows); start += 500 {
		chunk := rows[start:min(start+500, len(rows))]
		envs := make([][]byte, len(chunk))
		for i, r := range chunk {
			payload, err := models.PayloadOf(r.Batch)
			if err != nil {
				return signed, fmt.Errorf("declaration of machine %d generation %d: %w", r.MachineID, r.Generation, err)
			}
			if envs[i], err = models.SealOne(payload, signer); err != nil {
				return signed, err
			}
		}
		err := s.write(ctx, func(tx *Tx) error {
			for i, r := range chunk {
				res := tx.Model(&models.Declaration{}).Where("machine_id = ? AND generation = ? AND digest = ? AND envelope = ?",
					r.MachineID, r.Generation, r.Digest, []byte{}).Update("envelope", envs[i])
				if res.Error != nil {
					return res.Error
				}
				signed += int(res.RowsAffected)
			}
			return nil
		})
		if err != nil {
			return signed, mapErr(err)
		}
	}
	return signed, nil
}

func keysOf(m map[int64]bool) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
