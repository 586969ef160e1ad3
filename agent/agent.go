package agent

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"mesh/models"
	"mesh/version"
)

// Config is how the host runs.
type Config struct {
	StateDir string
	// Root maps every declared path under it ("/" in production).
	Root string
	// AllowRoots are the declared paths the host may manage (default "/").
	AllowRoots []string
	// Services is "host" (the host's own supervisor) or "systemd".
	Services string
	// MaxAttempts bounds the applies of one generation before it is rejected.
	MaxAttempts int
	// RetryBase is the first wait between failed attempts; it doubles.
	RetryBase time.Duration
	// Wait is how long each poll is held.
	Wait time.Duration
	// StopGrace is how long a service has between SIGTERM and SIGKILL.
	StopGrace time.Duration
	// CheckEvery is how often checks run between applies.
	CheckEvery time.Duration
	// Unpack are the ceilings a tree's archive is unpacked under (zero
	// fields take DefaultUnpackLimits).
	Unpack UnpackLimits
	// Logs bound what the host keeps of each service's output (zero
	// fields take DefaultLogLimits).
	Logs LogLimits
	// Systemctl is the systemctl the host runs daemon-reload with after an
	// apply changed a declared unit file (default "systemctl").
	Systemctl string
	Log       *slog.Logger
}

func (c *Config) defaults() {
	if c.Root == "" {
		c.Root = "/"
	}
	if len(c.AllowRoots) == 0 {
		c.AllowRoots = []string{"/"}
	}
	if c.Services == "" {
		c.Services = "host"
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.RetryBase <= 0 {
		c.RetryBase = time.Second
	}
	if c.Wait <= 0 {
		c.Wait = 50 * time.Second
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 10 * time.Second
	}
	if c.CheckEvery <= 0 {
		c.CheckEvery = 30 * time.Second
	}
	if c.Systemctl == "" {
		c.Systemctl = "systemctl"
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	c.Unpack.Defaults()
	c.Logs.defaults()
}

// Agent is a running host.
type Agent struct {
	// filesBefore are the paths of the files mesh managed when the apply
	// under way began (applyInFull).
	filesBefore map[string]bool
	cfg         Config
	id          *Identity
	client      *client
	root        *machineRoot
	services    services
	outbox      outbox
	state       *State
	current     *models.DeclarationPayload
	// applyingSend is the send of the declaration being applied: a
	// certificate's CSR names it, so the controller signs the names that
	// declaration gives.
	applyingSend string
	renewWait    time.Duration // backoff of a failing renewal
	// renewals are the certificates whose renewal fails, by resource: each
	// a failing check until it is renewed (renewalChecks).
	renewals renewalFailures
	// obtained are the service certificates this process obtained, by
	// resource: when (by the monotonic clock) and which (see renewalAt).
	obtained map[string]obtainedCert
	// newer is a declaration that arrived while a failing one waited for
	// its next attempt: the poll loop takes it before polling again.
	newer *pollResult

	trialDone bool // the upgraded report was answered: accepted, or refused for good
	// trialAccepted: the upgraded report was accepted, and the reconcile
	// marker is owed once this build has handled a poll's answer (a 304,
	// or a declaration's first apply) without dying, or half its trial's
	// deadline has passed; trialMarked once it is written.
	trialAccepted bool
	trialMarked   atomic.Bool
	trialPolls    int
	upgradeStaged bool
	// reloadPending: a unit file changed and systemd has not reloaded yet.
	reloadPending bool
	said          map[string]bool

	checksMu sync.Mutex
	// reported is what the controller was last told of each check (an
	// applied report's checks, or a checked report's; nil: nothing yet):
	// the check loop reports when a look differs from it, not from its own
	// last look, so an apply that caught a service still starting is
	// corrected once it passes, and a flap an apply's settle missed is
	// reported.
	reported     map[string]bool
	reportedGen  int64             // the generation reported is of
	checkTargets []models.Resource // the services, for checkLoop
	checkGen     int64             // the applied generation and its send, which checked reports name
	checkSend    string
	// lookNow wakes the check loop before its tick: a service exited, so
	// a check changed (DESIGN: a checked report goes out the moment one
	// does).
	lookNow chan struct{}
	// applying is set while a declaration is applied: the services are
	// being replaced, so what the check loop sees then is of neither
	// generation (the apply's own report carries its checks).
	applying bool
	// applies counts the applies begun: a look that began before one is
	// stale, however it ended (applied or not).
	applies int64
	// checked reports go through an outbox and a client of their own, so
	// the check loop never shares the poll loop's.
	checkedOut    outbox
	writes        stateWrites // what the host's writes to its state dir last met
	checkedClient *client
	// logs are the services whose last lines ride the next report.
	logs *logShipper
	// renewNext: no renewal of the machine certificate before then (the
	// controller refused the last, or the last was renewed less than
	// half its life ago); renewTried: when one was last asked for.
	renewNext, renewTried time.Time
	// moveNext: no move to TLS before then (the last failed).
	moveNext time.Time
}

// Run runs the host until ctx ends: adopt what an earlier run left, then
// poll, verify, apply, journal, report — one poll at a time.
func Run(ctx context.Context, cfg Config) error {
	ready := readyPipe()
	a, err := newAgent(cfg)
	if err != nil {
		return err
	}
	defer a.services.Close()
	// One host per machine, before it touches a service or the state.
	unlock, err := lockHost(a.cfg.StateDir)
	if err != nil {
		return err
	}
	defer unlock()
	a.adopt(ctx)
	a.saveState()
	a.reportRollback(ctx)
	go a.checkLoop(ctx)
	// Through its start: a release kept after its trial that hangs here
	// at a later start is stopped by its launcher, as one that exits.
	tellReady(ready)
	return a.loop(ctx)
}

// reportUnreadableState tells the controller why this host applies
// nothing: a refusal naming no send or generation, shown as the machine's
// last outcome. Best effort, once per start.
func reportUnreadableState(c *client, stateDir string, why error) {
	now := time.Now().UTC()
	// On the host's record too, where an operator on the machine looks.
	_ = appendJournal(stateDir, Entry{Time: now, Outcome: models.OutcomeRefused, Reason: why.Error()})
	b, err := json.Marshal(models.Report{Outcome: models.OutcomeRefused, Reason: why.Error(), HostVersion: version.Version, FinishedAt: &now})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_ = c.postReport(ctx, b)
	// A release put back by the launcher (a trial that left this state
	// behind it and died) is said too, or its rollout never halts and the
	// release is never failed: the record stays, so the start after the
	// file is mended says it again, with the refusal saved.
	rb, _, ok := pendingRollback(stateDir)
	if !ok {
		return
	}
	var ls launcherState
	if readJSON(launcherPath(stateDir), &ls) == nil && ls.CrashRolledBack != nil && ls.CrashRolledBack.From.Digest == rb.Digest {
		// A crash rollback, which the launcher withdraws unreported when
		// the release it put back crash-loops too (as this host does on
		// this state): the machine's fault, not the release's. Said, the
		// release would be failed for the whole fleet over one disk.
		return
	}
	if b, err = json.Marshal(models.Report{Outcome: models.OutcomeRolledBack, Reason: models.RolledBackReason(rb.From, rb.To, rb.Reason),
		HostVersion: version.Version, FinishedAt: &now}); err == nil {
		_ = c.postReport(ctx, b)
	}
}

func newAgent(cfg Config) (*Agent, error) {
	cfg.defaults()
	id, err := LoadIdentity(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	root, err := openMachineRoot(cfg.Root)
	if err != nil {
		return nil, err
	}
	st, err := LoadState(cfg.StateDir)
	if err != nil {
		// Nothing is applied without knowing what was (a generation older
		// than the last finished would be taken): the host stops, and
		// says why where an operator looks, not only in its own log.
		err = fmt.Errorf("the host's state file cannot be read: %w; it applies nothing until the file is repaired or removed "+
			"(removed, the next declaration is applied in full against nothing it knows it manages)", err)
		reportUnreadableState(newClient(id), cfg.StateDir, err)
		return nil, err
	}
	if st.Machine == "" {
		// A state from before the name was kept: named now, so enrolling
		// again under another name knows its generations were another's.
		st.Machine = id.Machine
		if err := st.Save(cfg.StateDir); err != nil {
			return nil, err
		}
	}
	a := &Agent{cfg: cfg, id: id, client: newClient(id), root: root, state: st,
		lookNow: make(chan struct{}, 1),
	}
	a.outbox = outbox{dir: filepath.Join(cfg.StateDir, "outbox"), stateDir: cfg.StateDir, log: cfg.Log, writes: &a.writes}
	a.checkedOut = outbox{dir: filepath.Join(cfg.StateDir, "outbox-checked"), stateDir: cfg.StateDir, log: cfg.Log, writes: &a.writes}
	a.checkedClient = a.client.sibling()
	switch cfg.Services {
	case "host":
		sup, err := newSupervisor(cfg.StateDir, root, cfg.Log, cfg.StopGrace)
		if err != nil {
			return nil, err
		}
		sup.limits = cfg.Logs
		sup.onRestart = func(id string) { a.logs.mark(id, models.LogRestarted) }
		sup.onExit = func(string) { a.lookSoon() }
		a.services = sup
	case "systemd":
		sd := newSystemd(root)
		sd.owedFile = filepath.Join(cfg.StateDir, "units-owed.json")
		a.services = sd
	default:
		return nil, fmt.Errorf("--services must be host or systemd, not %q", cfg.Services)
	}
	a.logs = &logShipper{}
	if t, ok := a.services.(serviceTail); ok {
		a.logs.src = t
	}
	if rc, ok := a.services.(restartCounter); ok {
		a.logs.counter = rc
	}
	return a, nil
}

// adopt recovers what a crash or restart left: half-installed trees, and
// the services the host supervised (adopted from their pidfiles, restarted
// if they died) — never a second copy.
func (a *Agent) adopt(ctx context.Context) {
	for _, id := range sortedIDs(a.state.Resources) {
		m := a.state.Resources[id]
		switch m.Kind {
		case "tree":
			a.root.recoverTree(m.Path)
		case "service":
			if m.Resource == nil {
				continue
			}
			if _, err := a.services.Ensure(ctx, *m.Resource, m.Digest); err != nil {
				a.cfg.Log.Error("adopting service", "service", id, "err", err)
			}
		}
	}
}

func (a *Agent) loop(ctx context.Context) error {
	backoff := time.Second
	wait := func(d time.Duration) bool {
		d += time.Duration(rand.Int64N(int64(d/2) + 1)) // jitter, so hosts spread out
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for ctx.Err() == nil {
		if err := a.outbox.flush(ctx, a.client); err != nil && ctx.Err() == nil {
			a.cfg.Log.Debug("reports wait in the outbox", "err", err)
		}
		a.renew(ctx)
		hold := a.cfg.Wait
		if os.Getenv(EnvTrialVersion) == version.Version && !a.trialDone {
			// On trial: poll at once, so the reconcile completes promptly;
			// then briefly, until the upgraded report is accepted.
			hold = min(hold, time.Duration(a.trialPolls)*2*time.Second)
			a.trialPolls++
		}
		hold = a.holdForRenewal(hold)
		res, err := a.newer, error(nil)
		a.newer = nil
		if res == nil {
			res, err = a.client.poll(ctx, a.state.Finished, a.state.FinishedSend, hold)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if errors.Is(err, errSwitch) {
				a.client.next()
			}
			a.cfg.Log.Warn("poll failed; retrying", "err", err, "next", a.client.base(), "in", backoff)
			if !wait(backoff) {
				return nil
			}
			backoff = min(backoff*2, 60*time.Second)
			continue
		}
		if res.tlsHint != "" && strings.HasPrefix(a.client.base(), "http://") {
			a.moveToTLS(ctx, res.tlsHint)
		}
		a.trial(ctx)
		a.confirmLauncher()
		a.renewDue(ctx)
		if res.notModified {
			backoff = time.Second
			a.resumeUpgrade(ctx)
			if a.upgradeStaged {
				return ErrUpgradeStaged
			}
			a.trialReconciled()
			continue
		}
		handled := a.handle(ctx, res)
		if a.upgradeStaged {
			return ErrUpgradeStaged
		}
		a.trialReconciled()
		if handled {
			backoff = time.Second
		} else {
			// A refusal that cannot advance the generation (a body this
			// host cannot trust, one over the size cap): do not ask again
			// at once, nor at a second's pace — each asks the controller
			// for the same body again. Only a 304 or a declaration taken
			// resets the pace.
			if !wait(backoff) {
				return nil
			}
			backoff = min(backoff*2, 60*time.Second)
		}
	}
	return nil
}

// handle takes one declaration; it returns false when it refused one whose
// generation it could not trust (so the poll loop backs off).
func (a *Agent) handle(ctx context.Context, res *pollResult) bool {
	etagGen, _ := strconv.ParseInt(strings.Trim(res.etag, `"`), 10, 64)
	if res.body == nil {
		// Unread, so neither its generation nor its send can be trusted:
		// the report names neither, as any refusal of an unverified body.
		a.refused(ctx, "", 0, "", fmt.Sprintf("refused: declaration larger than the size cap of %d bytes (send %s, generation %d claimed)", MaxDeclaration, res.send, etagGen), false)
		return false
	}
	v, err := verify(res.body, a.id.Keys, a.id.Machine)
	var rf *refusal
	if errors.As(err, &rf) {
		if v == nil || v.decl.Generation == 0 || v.decl.Machine != a.id.Machine {
			// Not verified, or not ours: neither its generation nor the
			// send it claims can be attributed to this machine, so the
			// report names neither and nothing is recorded as finished.
			digest := ""
			if v != nil {
				digest = v.digest
			}
			a.refused(ctx, "", 0, digest, fmt.Sprintf("%s (send %s, generation %d claimed)", rf.reason, res.send, etagGen), false)
			return false
		}
		a.refused(ctx, res.send, v.decl.Generation, v.digest, rf.reason, true)
		return true
	}
	d := &v.decl
	switch {
	case d.Generation < a.state.Applied:
		a.refused(ctx, res.send, d.Generation, v.digest, fmt.Sprintf("older: generation %d is older than generation %d, the last applied", d.Generation, a.state.Applied), false)
		return false
	case d.Generation == a.state.Applied && v.digest != a.state.AppliedDigest:
		a.refused(ctx, res.send, d.Generation, v.digest, fmt.Sprintf("generation %d was applied with digest %s; this one has %s", d.Generation, a.state.AppliedDigest, v.digest), false)
		return false
	case d.Generation == a.state.Applied && a.state.Finished > a.state.Applied:
		// A newer generation was finished since, and its attempt may have
		// changed the machine (a rejected apply stopped a service before
		// it failed): "already applied" would call the machine what this
		// one declares when it is not. A controller sends that content
		// again as a new generation; one sending this one is stale (seed
		// 000's instance, or a store restored from a backup).
		a.refused(ctx, res.send, d.Generation, v.digest, fmt.Sprintf("older: generation %d was applied, then generation %d was finished (the last finished)", d.Generation, a.state.Finished), false)
		return false
	case d.Generation == a.state.Applied:
		a.finish(ctx, res.send, v, models.OutcomeApplied, "no-op: generation already applied", nil, 0, nil)
		return true
	case d.Generation <= a.state.Finished:
		a.refused(ctx, res.send, d.Generation, v.digest, fmt.Sprintf("older: generation %d was already finished (the last finished is %d)", d.Generation, a.state.Finished), false)
		return false
	}
	if err := checkResources(d, a.cfg.AllowRoots); err != nil {
		a.refused(ctx, res.send, d.Generation, v.digest, err.Error(), true)
		return true
	}
	if err := checkHostUnit(d, a.cfg.StateDir); err != nil {
		a.refused(ctx, res.send, d.Generation, v.digest, err.Error(), true)
		return true
	}
	if len(d.Resources) == 0 && !d.EmptyOK && len(a.state.Resources) > 0 {
		a.refused(ctx, res.send, d.Generation, v.digest, fmt.Sprintf(
			"empty declaration without empty_ok while %d resource(s) run: a lost or restored store must not tear this machine down", len(a.state.Resources)), true)
		return true
	}
	a.applyWithRetries(ctx, res.send, v)
	if a.state.Applied == d.Generation && a.state.AppliedDigest == v.digest {
		// Kept before anything is fetched: a host cut short resumes it.
		target := d.Host
		if target != nil && target.Version == version.Version && !onTrial() {
			target = nil
		}
		if target != nil || a.state.HostRelease != nil {
			a.state.HostRelease, a.state.HostReleaseGen = target, d.Generation
			_ = a.saveState()
		}
		a.upgrade(ctx, d.Host, d.Generation)
	}
	return true
}

// upgrade moves to the host release h names, if it is another (see
// maybeUpgrade); a release staged sets upgradeStaged for the loop.
func (a *Agent) upgrade(ctx context.Context, h *models.HostRelease, gen int64) {
	if err := a.maybeUpgrade(ctx, h, gen); errors.Is(err, ErrUpgradeStaged) {
		a.upgradeStaged = true
	} else if err != nil {
		a.cfg.Log.Error("host upgrade", "err", err)
	}
}

// resumeUpgrade tries again the upgrade the applied generation names when
// it was cut short (State.HostRelease): once the host runs it, or refused
// it, there is none to resume.
func (a *Agent) resumeUpgrade(ctx context.Context) {
	h, gen := a.state.HostRelease, a.state.HostReleaseGen
	if h == nil || gen != a.state.Applied {
		return
	}
	if h.Version == version.Version {
		if !onTrial() {
			a.state.HostRelease = nil
			_ = a.saveState()
		}
		// On trial it is kept until the launcher keeps this build: a
		// power loss before then brings the build before it back, which
		// resumes the upgrade from it.
		return
	}
	if slices.Contains(a.state.RefusedReleases, h.Digest) {
		return
	}
	if os.Getenv(EnvLauncher) == "" {
		return // refused once, on the record: a bare host does not upgrade
	}
	a.once("resume-"+h.Digest, "resuming the upgrade to host release %s that generation %d names, cut short before", h.Version, gen)
	a.upgrade(ctx, h, gen)
}

// applyWithRetries applies a generation, retrying with backoff; after
// MaxAttempts it is rejected and the host waits for a newer one.
func (a *Agent) applyWithRetries(ctx context.Context, send string, v *verified) {
	a.current = &v.decl
	a.applyingSend = send
	a.setApplying(true)
	defer a.setApplying(false)
	for attempt := 1; ; attempt++ {
		started := time.Now().UTC()
		st := a.state.clone()
		actions, err := a.applyInFull(ctx, &v.decl, st)
		a.state = st // what succeeded is true now, even if a later step failed
		// A trial build that got through an apply (whatever its outcome)
		// has proved it can; its retries need not hold the verdict.
		a.trialReconciled()
		if err == nil {
			checks := a.checkAll(ctx, v.decl.Resources, 15*time.Second)
			for _, c := range checks {
				if !c.OK && isService(v.decl.Resources, c.Resource) {
					a.logs.mark(c.Resource, models.LogUnhealthy)
				}
			}
			a.finish(ctx, send, v, models.OutcomeApplied, "", actions, attempt, checks, started)
			return
		}
		var rf *refusal
		if errors.As(err, &rf) {
			a.saveState()
			a.refused(ctx, send, v.decl.Generation, v.digest, rf.reason, true, actions...)
			return
		}
		if ctx.Err() != nil {
			a.saveState()
			return
		}
		if id := failedService(err, &v.decl); id != "" {
			a.logs.mark(id, models.LogFailed)
		}
		if attempt >= a.cfg.MaxAttempts {
			a.finish(ctx, send, v, models.OutcomeRejected, fmt.Sprintf("failed %d attempts; last: %v", attempt, err), actions, attempt, nil, started)
			return
		}
		a.saveState()
		a.record(ctx, models.Report{Send: send, Generation: v.decl.Generation, Digest: v.digest, Outcome: models.OutcomeFailed,
			Reason: err.Error(), Attempt: attempt, StartedAt: &started}, actions, nil)
		d := min(a.cfg.RetryBase<<(attempt-1), 30*time.Second)
		a.cfg.Log.Warn("apply failed; retrying", "generation", v.decl.Generation, "attempt", attempt, "in", d, "err", err)
		if a.newer = a.newerWithin(ctx, v.decl.Generation, send, d); a.newer != nil {
			a.saveState()
			a.cfg.Log.Warn("a newer generation arrived; the failing one is left", "generation", v.decl.Generation, "attempt", attempt)
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// newerWithin waits d for the next attempt at generation gen, polling
// meanwhile: a declaration newer than gen (a fix, or a plan's rollback)
// is returned at once rather than after the failing generation's
// remaining attempts, which back off up to 30 s each. Without one (a 304,
// or the controller unreachable) it returns nil when d has passed.
//
// The poll names gen's send as the one that delivered it, as every poll
// names its generation's: a store restored from a backup that never made
// that send is a conflict (nothing sent), where a poll naming none was
// answered with the restored store's newer generation, applied in full
// over what the lost timeline gave the host.
func (a *Agent) newerWithin(ctx context.Context, gen int64, send string, d time.Duration) *pollResult {
	until := time.Now().Add(d)
	if d >= time.Second {
		res, err := a.client.poll(ctx, gen, send, d)
		if err == nil && !res.notModified && res.body != nil {
			return res
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(until)):
	}
	return nil
}

// finish records a generation the host is done with: state, journal, report.
func (a *Agent) finish(ctx context.Context, send string, v *verified, outcome, reason string, actions []models.Action, attempt int, checks []models.CheckResult, started ...time.Time) {
	gen := v.decl.Generation
	if gen >= a.state.Finished {
		a.state.Finished, a.state.FinishedSend = gen, send
	}
	if outcome == models.OutcomeApplied {
		a.state.Applied, a.state.AppliedDigest, a.state.AppliedSend = gen, v.digest, send
		a.setReported(gen, checks) // the applied report carries them
	}
	r := models.Report{Send: send, Generation: gen, Digest: v.digest, Outcome: outcome, Reason: reason, Attempt: attempt}
	if len(started) > 0 {
		r.StartedAt = &started[0]
	}
	a.record(ctx, r, actions, checks)
}

// refused records a refusal; finished says whether the generation counts
// as finished (it does for a verified declaration for this machine that
// the host will not apply; not for one it cannot trust or an older one).
// actions are what an apply did before the refusal came (none when every
// tree was staged first, as applyInFull does): on the record with it.
func (a *Agent) refused(ctx context.Context, send string, gen int64, digest, reason string, finished bool, actions ...models.Action) {
	if finished && gen > a.state.Finished {
		a.state.Finished, a.state.FinishedSend = gen, send
	}
	a.cfg.Log.Warn("refused a declaration", "generation", gen, "send", send, "reason", reason)
	a.record(ctx, models.Report{Send: send, Generation: gen, Digest: digest, Outcome: models.OutcomeRefused, Reason: reason}, actions, nil)
}

// record writes what the host just did, in DESIGN.md's order (state file,
// journal, report), with the report queued in the outbox first: the state
// file says the generation is finished, so the host will not be sent it
// again, and a crash between the state file and the report must not lose
// the report (a crash before the state file only repeats it: reports are
// rows, a second one harms nothing).
//
// It reports whether the report and the state were both written (the
// journal aside), a report the outbox could not write counting only once
// it was sent: what depends on them (a rollback's record) is removed only
// then.
func (a *Agent) record(ctx context.Context, r models.Report, actions []models.Action, checks []models.CheckResult) (kept bool) {
	sent, saved := a.recordReport(ctx, r, actions, checks)
	return sent && saved
}

// recordReport is record, saying apart whether the report is on its way
// (queued in the outbox, or sent) and whether the state was saved.
func (a *Agent) recordReport(ctx context.Context, r models.Report, actions []models.Action, checks []models.CheckResult) (sent, saved bool) {
	now := time.Now().UTC()
	r.FinishedAt = &now
	r.HostVersion = version.Version
	r.LauncherVersion = a.launcherVersion()
	r.Actions = actions
	r.Checks = checks
	r.Running = a.state.Running()
	if r.Send != "" {
		// Lines ride only a report the controller ties to this machine.
		r.Logs = a.logs.take(ctx)
	}
	queued := true
	if _, err := a.outbox.put(r); err != nil {
		// Held in memory by the outbox and sent from there below: the
		// controller must hear of the apply even when the disk is full.
		a.cfg.Log.Error("outbox: the report could not be written", "generation", r.Generation, "err", err)
		queued = false
	}
	saved = a.saveState() == nil
	if err := a.journal(Entry{Time: now, Send: r.Send, Generation: r.Generation, Digest: r.Digest,
		Outcome: r.Outcome, Reason: r.Reason, Attempt: r.Attempt, Actions: actions, Checks: checks}); err != nil {
		a.cfg.Log.Error("journal", "err", err)
	}
	err := a.outbox.flush(ctx, a.client)
	if err != nil {
		a.cfg.Log.Warn("report waits in the outbox", "err", err)
	}
	return queued || err == nil, saved
}

func (a *Agent) saveState() error {
	var targets []models.Resource
	var services []string
	for _, id := range sortedIDs(a.state.Resources) {
		// Every service: one its supervisor restarted fails without a check.
		if m := a.state.Resources[id]; m.Kind == "service" && m.Resource != nil {
			targets = append(targets, *m.Resource)
		}
		if a.state.Resources[id].Kind == "service" {
			services = append(services, id)
		}
	}
	a.logs.setServices(services)
	a.checksMu.Lock()
	a.checkTargets = targets
	a.checkGen, a.checkSend = a.state.Applied, a.state.AppliedSend
	a.checksMu.Unlock()
	err := a.state.Save(a.cfg.StateDir)
	if err != nil {
		a.cfg.Log.Error("saving state", "err", err)
		a.writes.note("state", a.cfg.StateDir, "", sizeOfIndented(a.state), err)
		return err
	}
	a.writes.note("state", a.cfg.StateDir, "", 0, nil)
	return nil
}

// setReported records the checks a report of generation gen just told
// the controller.
func (a *Agent) setReported(gen int64, c []models.CheckResult) {
	a.checksMu.Lock()
	a.setReportedLocked(gen, c)
	a.checksMu.Unlock()
}

func (a *Agent) setReportedLocked(gen int64, c []models.CheckResult) {
	m := make(map[string]bool, len(c))
	for _, r := range c {
		m[r.Resource] = r.OK
	}
	a.reported, a.reportedGen = m, gen
}

// lookDiffers says whether a look at generation gen's checks is not what
// the controller was last told of that generation; stale when an apply
// finished since the look began (its report told the controller of a
// newer generation, and this look is of the one before: dropped).
func (a *Agent) lookDiffers(gen, applies int64, res []models.CheckResult) (differs, stale bool) {
	a.checksMu.Lock()
	defer a.checksMu.Unlock()
	switch {
	case a.checkGen != gen || a.applying || a.applies != applies:
		// An apply began (or finished) since the look began.
		return false, true
	case a.reported == nil || a.reportedGen != gen:
		return len(res) > 0 || a.reported != nil, false
	case len(res) != len(a.reported):
		return true, false
	}
	for _, c := range res {
		if was, ok := a.reported[c.Resource]; !ok || was != c.OK {
			return true, false
		}
	}
	return false, false
}

// lookReported records a look's checks as told, unless an apply finished
// since the look began (its own report's checks stand).
func (a *Agent) lookReported(gen int64, res []models.CheckResult) {
	a.checksMu.Lock()
	defer a.checksMu.Unlock()
	if a.checkGen == gen {
		a.setReportedLocked(gen, res)
	}
}

// checkLoop runs the checks between applies. A change of health is
// logged, journaled and reported promptly (outcome checked, naming the
// applied send), so a service that turns unhealthy is a fact on the
// controller within one check interval, not at the next apply.
func (a *Agent) checkLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.CheckEvery)
	defer t.Stop()
	var prev map[string]bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.lookNow:
		}
		rs, gen, send, applying, applies := a.snapshotChecks()
		if applying {
			// Between applies only: mid-apply a check would blame the
			// applied generation for the service being replaced.
			continue
		}
		if err := a.logs.countRestarts(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Log.Warn("counting services' restarts", "err", err)
		}
		res := a.checkAll(ctx, rs, 0)
		if ctx.Err() != nil {
			// Cut short by the host's stop: its checks say "context
			// canceled", not how the services are.
			return
		}
		cur := map[string]bool{}
		for _, c := range res {
			cur[c.Resource] = c.OK
			if was, ok := prev[c.Resource]; !ok || was != c.OK {
				a.cfg.Log.Info("check", "service", c.Resource, "ok", c.OK, "detail", c.Detail)
				if !c.OK && isService(rs, c.Resource) {
					a.logs.mark(c.Resource, models.LogUnhealthy)
				}
			}
		}
		prev = cur
		// Reported when the look differs from what the controller was
		// last told (reported). A service that restarted (or turned
		// unhealthy) ships its last lines within one check interval even
		// when no check changed (a crash loop seldom: logShipper.due).
		differs, stale := a.lookDiffers(gen, applies, res)
		if !stale && (differs || a.logs.waiting()) && send != "" {
			a.reportChecked(ctx, gen, send, res)
			a.lookReported(gen, res)
		}
		if err := a.checkedOut.flush(ctx, a.checkedClient); err != nil && ctx.Err() == nil {
			a.cfg.Log.Warn("checked report waits in the outbox", "err", err)
		}
	}
}

// isService says whether id is a service among rs: only a service has
// output to ship when its check fails (the host's own check of its state
// dir, and a certificate whose renewal fails, have none: a certificate's
// "lines" were read and shipped as a service's).
func isService(rs []models.Resource, id string) bool {
	for i := range rs {
		if rs[i].ID == id {
			return rs[i].Kind == "service"
		}
	}
	return false
}

// checkAll runs the checks of rs as checkServices does, with what the
// host's supervisor knows of the services it restarted.
func (a *Agent) checkAll(ctx context.Context, rs []models.Resource, settle time.Duration) []models.CheckResult {
	var ca *x509.Certificate
	if a.id != nil {
		ca = a.id.ca
	}
	sh, _ := a.services.(serviceHealth)
	res := checkServices(ctx, a.root, ca, rs, settle, sh)
	if c := a.writes.stateDirCheck(a.cfg.StateDir); c != nil {
		res = append(res, *c)
	}
	return append(res, a.renewals.checks()...)
}

// lookSoon wakes the check loop (never blocks).
func (a *Agent) lookSoon() {
	select {
	case a.lookNow <- struct{}{}:
	default:
	}
}

// journal appends e to the journal, noting how the write ended for the
// state dir's check.
func (a *Agent) journal(e Entry) error {
	err := appendJournal(a.cfg.StateDir, e)
	size := 0
	if err != nil {
		size = sizeOf(e)
	}
	a.writes.note("journal", a.cfg.StateDir, journalPath(a.cfg.StateDir), size, err)
	return err
}

// reportChecked queues a checked report and journals it.
func (a *Agent) reportChecked(ctx context.Context, gen int64, send string, res []models.CheckResult) {
	now := time.Now().UTC()
	r := models.Report{Send: send, Generation: gen, Outcome: models.OutcomeChecked, FinishedAt: &now,
		HostVersion: version.Version, LauncherVersion: a.launcherVersion(), Checks: res, Logs: a.logs.take(ctx)}
	if _, err := a.checkedOut.put(r); err != nil {
		a.cfg.Log.Error("outbox", "err", err)
	}
	if err := a.journal(Entry{Time: now, Send: send, Generation: gen, Outcome: r.Outcome, Checks: res}); err != nil {
		a.cfg.Log.Error("journal", "err", err)
	}
}

func (a *Agent) snapshotChecks() (rs []models.Resource, gen int64, send string, applying bool, applies int64) {
	a.checksMu.Lock()
	defer a.checksMu.Unlock()
	return a.checkTargets, a.checkGen, a.checkSend, a.applying, a.applies
}

// setApplying says an apply began or ended (applyWithRetries).
func (a *Agent) setApplying(on bool) {
	a.checksMu.Lock()
	defer a.checksMu.Unlock()
	a.applying = on
	if on {
		a.applies++
	}
}
