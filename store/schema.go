package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"mesh/models"
)

// hostInfoPrefix begins a notification that a machine's host info was
// recorded: "hostinfo:ID/SENDER", SENDER the recording store's, which
// passes its own by: hearing it, the instance forgot what it had just
// recorded, and its host's next poll, finding nothing new, wrote it again
// (an idle poll touches the store never). An instance of a build before
// it reads no bump in it (its id is not a number) and passes it by.
const hostInfoPrefix = "hostinfo:"

// OnHostInfo registers f to be told, by notification (PostgreSQL), of each
// machine whose host version or schemas an instance recorded.
func (s *Store) OnHostInfo(f func(machineID int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onHostInfo = append(s.onHostInfo, f)
}

func (s *Store) announceHostInfo(payload string) bool {
	rest, ok := strings.CutPrefix(payload, hostInfoPrefix)
	if !ok {
		return false
	}
	rest, sender, _ := strings.Cut(rest, "/")
	id, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || sender != "" && sender == s.sender {
		return true
	}
	s.mu.RLock()
	fs := s.onHostInfo
	s.mu.RUnlock()
	for _, f := range fs {
		f(id)
	}
	return true
}

// recordHostInfo stores the host version and schemas a poll reported and,
// when the set of schemas changed (an upgrade, or a launcher's rollback to
// an older host), bumps the machine's generation with trigger schema in
// the same transaction: the next declaration is composed afresh for what
// the host decodes now, never sent from a generation composed for the
// host before.
func recordHostInfo(tx *Tx, machineID int64, hostVersion, schema string) error {
	var m models.Machine
	q := tx.DB
	if tx.s.dialect == Postgres {
		q = q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	if err := q.Select("id", "name", "os", "arch", "schema", "conflict", "host_version").Where("id = ?", machineID).First(&m).Error; err != nil {
		return err
	}
	if tx.s.dialect == Postgres && (m.HostVersion != hostVersion || m.Schema != schema) {
		// Every instance remembers what each host's polls said of itself
		// and records only a change: one that heard this host before must
		// forget it, or a poll there saying what it said then (a trial's
		// schemas, the host upgraded again) would record nothing.
		if err := tx.Exec("SELECT pg_notify(?, ?)", tx.s.channel, hostInfoPrefix+strconv.FormatInt(machineID, 10)+"/"+tx.s.sender).Error; err != nil {
			return err
		}
	}
	if err := tx.Model(&models.Machine{}).Where("id = ?", machineID).
		Updates(map[string]any{"host_version": hostVersion, "schema": schema}).Error; err != nil {
		return err
	}
	failed, err := judgeTrialSchemas(tx, &m, hostVersion, schema)
	if err != nil {
		return err
	}
	was, now := models.SchemasOf(m.Schema).String(), models.SchemasOf(schema).String()
	if was == now || m.Conflict || failed {
		// A failed trial already bumped the generation (its target went
		// back), composed afresh for the schemas recorded above.
		// A machine in conflict is composed afresh when an admin resolves it.
		return nil
	}
	if err := bumpGenerations(tx, []int64{m.ID}, models.TriggerSchema); err != nil {
		return err
	}
	return audit(tx, "host:"+m.Name, "schema", "machine/"+m.Name,
		fmt.Sprintf("host %s decodes schemas %s (was %s)", hostVersion, now, was))
}

// judgeTrialSchemas fails the trial of the host release a machine is
// upgrading to when the host polling as that release advertises other
// schemas than the release records (models.TrialSchemas): the rollout
// halts with the reason and the machine's target goes back. True when it
// failed one.
func judgeTrialSchemas(tx *Tx, m *models.Machine, hostVersion, schema string) (bool, error) {
	var rm models.RolloutMachine
	err := tx.Joins("JOIN rollouts ON rollouts.id = rollout_machines.rollout_id").
		Where("rollout_machines.machine_id = ? AND rollouts.state IN ? AND rollout_machines.state = ? AND rollouts.version = ?",
			m.ID, []string{models.RolloutRunning, models.RolloutPaused}, models.UpgradeUpgrading, hostVersion).
		Order("rollout_machines.rollout_id DESC").First(&rm).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var rel models.Release
	if err := tx.Select("version", "schemas").Where("version = ? AND os = ? AND arch = ?", hostVersion, m.OS, m.Arch).
		First(&rel).Error; err != nil {
		return false, err
	}
	reason := models.TrialSchemas(rel.Version, models.SchemasOf(rel.Schemas), models.SchemasOf(schema))
	if reason == "" {
		return false, nil
	}
	var ro models.Rollout
	if err := tx.Where("id = ?", rm.RolloutID).First(&ro).Error; err != nil {
		return false, err
	}
	return true, failMachine(tx, &ro, &rm, models.UpgradeFailed, reason)
}

// readApplied reads, for the machines whose hosts cannot be sent the newest
// schema, the declarations a held-back declaration may carry
// (models.HoldBack): the one each last applied, and, where its content is
// past the host's schemas (a host rolled back after applying it), the
// earlier ones it applied that the host may decode, newest first. One
// query for the set; the earlier ones one query per such machine, which
// only a rollback past applied content makes. Machines whose hosts decode
// everything are not read (they are never held back).
func readApplied(tx *Tx, ms []models.Machine) (map[int64][]*models.DeclarationPayload, error) {
	out := map[int64][]*models.DeclarationPayload{}
	var ids []int64
	want := map[int64]int64{}
	host := map[int64]models.Schemas{}
	for _, m := range ms {
		if !models.SchemasOf(m.Schema).ExpressesAll() && m.AppliedGeneration > 0 {
			ids = append(ids, m.ID)
			want[m.ID], host[m.ID] = m.AppliedGeneration, models.SchemasOf(m.Schema)
		}
	}
	if len(ids) == 0 {
		return out, nil
	}
	var ds []models.Declaration
	in, arg := inID(tx, "machine_id", ids)
	if err := tx.Select("machine_id", "generation", "envelope", "batch").Where(in, arg).Where("generation IN ?", generationsOf(want)).
		Find(&ds).Error; err != nil {
		return nil, err
	}
	for _, d := range ds {
		if want[d.MachineID] != d.Generation {
			continue
		}
		p, err := payloadOf(&d)
		if err != nil {
			return nil, err
		}
		out[d.MachineID] = []*models.DeclarationPayload{p}
		if _, ok := host[d.MachineID].Pick(models.NeededSchema(p.Resources)); ok {
			continue
		}
		earlier, err := readEarlierApplied(tx, d.MachineID, d.Generation, host[d.MachineID].Max())
		if err != nil {
			return nil, err
		}
		out[d.MachineID] = append(out[d.MachineID], earlier...)
	}
	return out, nil
}

// earlierApplied bounds how far back a host rolled back past applied
// content is looked for content it decodes: the one before its trial is
// normally the first.
const earlierApplied = 10

// readEarlierApplied reads the declarations machine applied (a report
// with outcome applied that a send backs) before generation before,
// composed in a schema at most upTo, newest first.
func readEarlierApplied(tx *Tx, machine, before int64, upTo int) ([]*models.DeclarationPayload, error) {
	var ds []models.Declaration
	if err := tx.Select("machine_id", "generation", "envelope", "batch").
		Where("machine_id = ? AND generation < ? AND schema <= ?", machine, before, upTo).
		Where("EXISTS (SELECT 1 FROM reports WHERE reports.machine_id = declarations.machine_id AND reports.generation = declarations.generation AND reports.digest = declarations.digest AND reports.outcome = ? AND reports.send_id <> '')",
			models.OutcomeApplied).
		Order("generation DESC").Limit(earlierApplied).Find(&ds).Error; err != nil {
		return nil, err
	}
	out := make([]*models.DeclarationPayload, 0, len(ds))
	for i := range ds {
		p, err := payloadOf(&ds[i])
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// payloadOf opens a stored declaration's envelope.
func payloadOf(d *models.Declaration) (*models.DeclarationPayload, error) {
	var p models.DeclarationPayload
	payload, err := models.PayloadOf(d.Sealed())
	if err != nil {
		return nil, fmt.Errorf("declaration of machine %d generation %d: %w", d.MachineID, d.Generation, err)
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("declaration of machine %d generation %d: %w", d.MachineID, d.Generation, err)
	}
	return &p, nil
}

// readDecoders reads, for the os/arch of the machines whose hosts cannot be
// sent the newest schema (ExpressesAll), the ready host releases that decode more than
// schema 1, newest first. Machines whose hosts decode everything are
// never held back and read nothing.
func readDecoders(tx *Tx, ms []models.Machine) (map[string][]models.Release, error) {
	out := map[string][]models.Release{}
	// Each platform once: a chunk of a fan-out is hundreds of machines on
	// a few platforms, and a list of one parameter a machine cost a
	// statement of a thousand parameters to parse and bind.
	oses, arches := map[string]bool{}, map[string]bool{}
	for _, m := range ms {
		if !models.SchemasOf(m.Schema).ExpressesAll() {
			oses[m.OS], arches[m.Arch] = true, true
		}
	}
	if len(oses) == 0 {
		return out, nil
	}
	var rs []models.Release
	if err := tx.Select("id", "version", "os", "arch", "schemas").
		Where("state = ? AND schemas <> ? AND os IN ? AND arch IN ?", models.ReleaseReady, "1", slices.Collect(maps.Keys(oses)), slices.Collect(maps.Keys(arches))).
		Order("id DESC").Find(&rs).Error; err != nil {
		return nil, err
	}
	for _, r := range rs {
		out[r.OS+"/"+r.Arch] = append(out[r.OS+"/"+r.Arch], r)
	}
	return out, nil
}

// decoder is the host release a held-back machine can be rolled out to for
// schema need: its target release when that decodes it, else the newest
// ready release for its platform that does (nil when none).
func (in *composeInput) decoder(m models.Machine, need int, target *models.Release) *models.Release {
	decodes := func(r *models.Release) bool { _, ok := models.SchemasOf(r.Schemas).Pick(need); return ok }
	if target != nil && decodes(target) {
		return target
	}
	for i := range in.decoders[m.OS+"/"+m.Arch] {
		if r := &in.decoders[m.OS+"/"+m.Arch][i]; decodes(r) {
			return r
		}
	}
	return nil
}

// forHost puts p in the schema m's host is sent: the lowest it advertises
// that expresses the content, or, when it decodes none that does,
// held-back content (models.HoldBack) and the reason, which names the
// release that decodes the schema needed (decoder).
func (in *composeInput) forHost(m models.Machine, p *models.DeclarationPayload, target *models.Release) (*models.DeclarationPayload, string, error) {
	hs := models.SchemasOf(m.Schema)
	if s, ok := hs.Pick(p.Schema); ok {
		p.Schema = s
		return p, "", nil
	}
	held := models.HeldBack{Need: p.Schema, HostVersion: m.HostVersion, Host: hs}
	if r := in.decoder(m, p.Schema, target); r != nil {
		held.Release, held.ReleaseSchemas = r.Version, models.SchemasOf(r.Schemas)
	}
	hp, from, err := models.HoldBack(p, in.applied[m.ID], m.AppliedGeneration, hs)
	if err != nil {
		return nil, "", fmt.Errorf("%s, and cannot be held back: %w", held.Reason(), err)
	}
	held.From, held.Applied = from, m.AppliedGeneration
	return hp, held.Reason(), nil
}

// recordHeldBack puts a composed generation's held-back reason on its
// machine where it changed (the steady state writes nothing), guarded by
// the generation so a newer one's reason is never overwritten.
func recordHeldBack(tx *Tx, rows []composedRow) error {
	for _, r := range rows {
		if r.HeldBack == r.heldBefore {
			continue
		}
		if err := tx.Model(&models.Machine{}).Where("id = ? AND generation = ?", r.MachineID, r.Generation).
			Update("held_back", r.HeldBack).Error; err != nil {
			return err
		}
	}
	return nil
}

// heldBackSince keeps m.HeldBack only when its current generation (at
// least any step sent to it) was composed held back: the machine's reason
// may be an older generation's until the current one is composed, and new
// content (a build that no longer needs the later schema) may end it.
func heldBackSince(tx *Tx, m *models.Machine) error {
	if m.HeldBack == "" {
		return nil
	}
	var n int64
	if err := tx.Model(&models.Declaration{}).Where("machine_id = ? AND generation = ? AND held_back <> ''", m.ID, m.Generation).
		Count(&n).Error; err != nil {
		return err
	}
	if n == 0 {
		m.HeldBack = ""
	}
	return nil
}

// RecordHostInfo stores the host version and schemas a poll reported (see
// recordHostInfo). The hub calls it only when they differ from what it
// last saw.
func (s *Store) RecordHostInfo(ctx context.Context, machineID int64, hostVersion, schema string) error {
	return s.write(ctx, func(tx *Tx) error { return recordHostInfo(tx, machineID, hostVersion, schema) })
}

// composeErrorSince keeps m.ComposeError, of its current generation, only
// while no declaration was composed for it since generation from: then
// nothing could be sent to it since. A declaration of a generation in
// between was sent, or can be, and its host may yet apply it; and a
// compose of the current generation that succeeded after the error was
// recorded leaves it recorded.
func composeErrorSince(tx *Tx, m *models.Machine, from int64) error {
	if m.ComposeError == "" || m.ComposeErrorGen != m.Generation {
		return nil
	}
	var n int64
	if err := tx.Model(&models.Declaration{}).Where("machine_id = ? AND generation >= ?", m.ID, from).Count(&n).Error; err != nil {
		return err
	}
	if n > 0 {
		m.ComposeError = ""
	}
	return nil
}
