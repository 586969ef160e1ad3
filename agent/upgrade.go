package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"mesh/models"
	"mesh/version"
)

// ExitUpgrade is the status with which `mesh-host run` hands over to a
// staged release: the launcher then runs it on trial.
const ExitUpgrade = 3

// ErrUpgradeStaged ends Run when a new release is staged for the launcher.
var ErrUpgradeStaged = errors.New("a new host release is staged; handing over to it")

// Environment the launcher gives the host it runs.
const (
	EnvLauncher     = "MESH_LAUNCHER"      // set: a launcher runs this host and can hand over
	EnvTrialVersion = "MESH_TRIAL_VERSION" // this host is on trial as that version
	EnvTrialFrom    = "MESH_TRIAL_FROM"    // the version it replaces
	// EnvTrialDeadline is the trial's deadline in seconds (a launcher of
	// an earlier release does not set it).
	EnvTrialDeadline = "MESH_TRIAL_DEADLINE"
	// EnvRollback is a rollback (its record's JSON) the launcher could not
	// write to rollback.json, for the host to report.
	EnvRollback = "MESH_ROLLBACK"
	// EnvReadyFD is a descriptor the host writes a line to, and closes,
	// once it has got through its start (its state read, its services
	// adopted) and begins to poll (tellReady): a launcher of an earlier
	// release does not set it.
	EnvReadyFD = "MESH_HOST_READY_FD"
)

// readyPipe is the launcher's descriptor to tell it the host got through
// its start (EnvReadyFD), nil when it gave none. It is closed on exec at
// once: a service the host starts meanwhile does not hold it.
func readyPipe() *os.File {
	fd, err := strconv.Atoi(os.Getenv(EnvReadyFD))
	if err != nil || fd < 3 {
		return nil
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "launcher-ready")
}

// tellReady writes the line the launcher waits for, once.
func tellReady(f *os.File) {
	if f == nil {
		return
	}
	_, _ = f.WriteString("ready\n")
	_ = f.Close()
}

// pending is a staged release waiting for the launcher (launch.json).
type pending struct {
	Version    string `json:"version"`
	Digest     string `json:"digest"`
	Path       string `json:"path"`
	Generation int64  `json:"generation"`
}

// rollback is what the launcher records when it puts known-good back
// (rollback.json); the restored host reports it.
type rollback struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	Digest string    `json:"digest"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Also are the digests of releases rolled back on this host before,
	// whose record this one took the place of before any host reported
	// it: refused too.
	Also []string `json:"also,omitempty"`
}

func pendingPath(dir string) string  { return filepath.Join(dir, "launch.json") }
func rollbackPath(dir string) string { return filepath.Join(dir, "rollback.json") }

// reportedRollbackPath is a rollback record whose report is on its way
// (queued or sent) while the refusal of its release is not saved yet: read
// again at the next start for the refusal, not reported again. The
// launcher takes rollback.json alone for a rollback no host has reported.
func reportedRollbackPath(dir string) string { return filepath.Join(dir, "rollback.reported.json") }

// trialRefusedPath is where a trial host notes that the controller
// refused its upgraded report (failed its trial): a hand-over it then makes
// is the release's rollback, not a move the controller made around it.
func trialRefusedPath(dir, v string) string { return filepath.Join(dir, "trial-refused-"+v) }

func markerPath(dir, v string) string {
	return filepath.Join(dir, "reconciled-"+v)
}

// maybeUpgrade acts on the declaration's host block: a host whose version
// differs downloads the release, verifies its digest and signature, stages
// it under versions/<version>/ and hands over to the launcher.
func (a *Agent) maybeUpgrade(ctx context.Context, h *models.HostRelease, gen int64) error {
	if h == nil || h.Version == version.Version {
		return nil
	}
	if h.OS != runtime.GOOS || h.Arch != runtime.GOARCH {
		return a.refuseRelease(ctx, h, gen, fmt.Sprintf("built for %s/%s, this host is %s/%s", h.OS, h.Arch, runtime.GOOS, runtime.GOARCH))
	}
	if slices.Contains(a.state.RefusedReleases, h.Digest) {
		// Said to the controller (and journaled), once a generation: its
		// rollout halts with why, where it waited out its deadline for an
		// upgrade that would never come and then failed the release.
		return a.refuseRelease(ctx, h, gen, "it was rolled back on this host before and is not fetched again; release a new version")
	}
	if os.Getenv(EnvLauncher) == "" {
		// Said to the controller, not only to this host's log: else its
		// machine showed "upgrading" while its rollout waited out its
		// deadline for an upgrade that was never going to happen. The
		// release stays the one to resume (State.HostRelease): started
		// again under the launcher, as the refusal says to, the host takes
		// it up at its next poll, where it waited for a new generation
		// (a person's push) to name it again.
		a.refused(ctx, a.sendOf(gen), gen, h.Digest, models.ReleaseRefused(h.Version,
			"this host does not run under `mesh-host launch`, which keeps known-good and rolls back a failed release; run it so (the host's unit does) to upgrade"), false)
		return nil
	}
	ok := false
	for _, k := range a.id.Keys {
		if k.KeyID == h.KeyID && len(k.PublicKey) == ed25519.PublicKeySize &&
			ed25519.Verify(ed25519.PublicKey(k.PublicKey), models.ReleaseStatement(h.Version, h.OS, h.Arch, h.Digest), h.Signature) {
			ok = true
		}
	}
	if !ok {
		return a.refuseRelease(ctx, h, gen, "its signature does not verify with a trusted key")
	}
	blob, err := a.client.fetchBlob(ctx, a.cfg.StateDir, h.Digest, h.Size)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return a.refuseRelease(ctx, h, gen, err.Error())
	}
	// Staging that fails (a full disk) is said to the controller as any
	// refusal: logged only, the rollout waited out its deadline and then
	// failed a release nothing was known against.
	dir := filepath.Join(a.cfg.StateDir, "versions", h.Version)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return a.refuseRelease(ctx, h, gen, "staging it: "+err.Error())
	}
	staged := filepath.Join(dir, "mesh-host")
	if err := copyFile(blob, staged, 0o755); err != nil {
		return a.refuseRelease(ctx, h, gen, "staging it: "+err.Error())
	}
	if ok, err := fileHasDigest(staged, h.Digest); err != nil || !ok {
		return a.refuseRelease(ctx, h, gen, "the staged copy does not match the digest")
	}
	if err := writeJSONAtomic(pendingPath(a.cfg.StateDir), pending{Version: h.Version, Digest: h.Digest, Path: staged, Generation: gen}, 0o600); err != nil {
		return a.refuseRelease(ctx, h, gen, "staging it: "+err.Error())
	}
	a.cfg.Log.Info("host release staged; handing over", "from", version.Version, "to", h.Version, "digest", h.Digest)
	return ErrUpgradeStaged
}

// refuseRelease records a release this host will not run: the running
// binary is untouched. It is tried again only with a new generation (bad
// bytes may have been the transport's doing); a release that was rolled
// back is never fetched again.
func (a *Agent) refuseRelease(ctx context.Context, h *models.HostRelease, gen int64, why string) error {
	if a.state.HostRelease != nil && a.state.HostRelease.Digest == h.Digest {
		a.state.HostRelease = nil // refused: nothing to resume (saved with the refusal)
	}
	a.refused(ctx, a.sendOf(gen), gen, h.Digest, models.ReleaseRefused(h.Version, why), false)
	return nil
}

// sendOf names the send of generation gen for a report the host starts
// itself (a refused release, a rollback): the last applied send when gen is
// the generation last applied, so the controller can tie the report to the
// send whose declaration led to it; else none.
func (a *Agent) sendOf(gen int64) string {
	if gen > 0 && gen == a.state.Applied {
		return a.state.AppliedSend
	}
	return ""
}

// trial runs on a host the launcher started on trial: once it has polled
// (a 304 counts) it reports upgraded; once that report is accepted it
// leaves the marker the launcher waits for. A report the controller
// refuses (it failed this trial: the release advertises other schemas
// than it records, or the rollout's deadline passed) is journaled and not
// sent again, and no marker is written: the launcher puts known-good back
// at the trial's deadline, as the controller already put the target back.
func (a *Agent) trial(ctx context.Context) {
	if os.Getenv(EnvTrialVersion) != version.Version || a.trialDone {
		return
	}
	now := time.Now().UTC()
	r := models.Report{Send: a.sendOf(a.state.Applied), Generation: a.state.Applied, Digest: a.state.AppliedDigest,
		Outcome: models.OutcomeUpgraded, Reason: fmt.Sprintf("upgraded from %s to %s", os.Getenv(EnvTrialFrom), version.Version),
		HostVersion: version.Version, LauncherVersion: a.launcherVersion(), FinishedAt: &now, Running: a.state.Running()}
	b, _ := json.Marshal(r)
	err := a.client.postReport(ctx, b)
	var refused *reportRefused
	if errors.As(err, &refused) {
		a.trialDone = true
		a.cfg.Log.Error("the controller refused this trial's upgraded report; not writing the reconcile marker, so the launcher puts known-good back",
			"version", version.Version, "status", refused.status, "detail", refused.detail)
		if err := writeFileAtomic(trialRefusedPath(a.cfg.StateDir, version.Version), []byte(refused.detail+"\n"), 0o600); err != nil {
			a.cfg.Log.Error("noting the refused trial", "err", err)
		}
		_ = appendJournal(a.cfg.StateDir, Entry{Time: now, Send: r.Send, Generation: r.Generation, Digest: r.Digest, Outcome: r.Outcome, Reason: r.Reason,
			ReportRefused: &ReportRefusal{Status: refused.status, Detail: refused.detail}})
		return
	}
	if err != nil {
		a.cfg.Log.Warn("upgraded report not accepted yet", "err", err)
		return
	}
	a.trialDone, a.trialAccepted = true, true
	_ = appendJournal(a.cfg.StateDir, Entry{Time: now, Send: r.Send, Generation: r.Generation, Digest: r.Digest, Outcome: r.Outcome, Reason: r.Reason})
	deadline := defaultTrialDeadline
	if secs, err := strconv.Atoi(os.Getenv(EnvTrialDeadline)); err == nil && secs > 0 {
		deadline = time.Duration(secs) * time.Second
	}
	// An apply that takes long (trees to fetch) does not run the trial out
	// of time: by half its deadline, counted from the process's start as
	// the launcher counts it, the build has shown it runs.
	time.AfterFunc(max(0, time.Until(processStart.Add(deadline/2))), a.trialReconciled)
}

// processStart is when this host process started: a trial's deadline runs
// from then (the launcher's timer starts as it starts the process).
var processStart = time.Now()

// defaultTrialDeadline is the launcher's default trial deadline, assumed
// when a launcher of an earlier release does not say its own.
const defaultTrialDeadline = 2 * time.Minute

// onTrial says whether this process is a release on trial under its
// launcher (kept or not: the launcher keeps the process it tried).
func onTrial() bool { return os.Getenv(EnvTrialVersion) == version.Version }

// trialReconciled writes the reconcile marker of a trial whose upgraded
// report was accepted, once this build has handled the answer of a poll:
// a 304, or a declaration (applied once, whatever came of it, or refused).
// Written at the report, it kept a build that then died applying the
// generation its new schemas brought — restarted by its launcher for good,
// never reaching the poll that would move it back.
func (a *Agent) trialReconciled() {
	if !a.trialAccepted || !a.trialMarked.CompareAndSwap(false, true) {
		return
	}
	if err := writeFileAtomic(markerPath(a.cfg.StateDir, version.Version), []byte(version.Version+"\n"), 0o600); err != nil {
		a.cfg.Log.Error("writing the reconcile marker", "err", err)
	}
}

// reportRollback reports a rollback the launcher recorded, and remembers
// the release so it is not fetched again.
//
// A rollback whose record the launcher could not write comes in the
// environment (EnvRollback) instead: reported the same way, with no record
// to remove. The launcher hands it to each host it starts until the record
// can be written, so a host started again on a full disk reports it again.
func (a *Agent) reportRollback(ctx context.Context) {
	var rb rollback
	if readJSON(reportedRollbackPath(a.cfg.StateDir), &rb) == nil {
		// Reported by an earlier start, its refusal not saved then.
		a.refuseRolledBack(rb)
		if a.saveState() == nil {
			_ = os.Remove(reportedRollbackPath(a.cfg.StateDir))
		}
	}
	rb, fromEnv, ok := pendingRollback(a.cfg.StateDir)
	if !ok {
		return
	}
	a.refuseRolledBack(rb)
	sent, saved := a.recordReport(ctx, models.Report{Send: a.sendOf(a.state.Applied), Generation: a.state.Applied, Digest: a.state.AppliedDigest,
		Outcome: models.OutcomeRolledBack, Reason: models.RolledBackReason(rb.From, rb.To, rb.Reason)}, nil, nil)
	switch {
	case fromEnv || !sent:
		// Neither the report nor the refusal of the release may be lost
		// (a full disk): the record stays, and the next start tries again.
	case !saved:
		// On its way, the refusal not saved: the next start refuses it
		// again without reporting it twice, and the launcher sees it
		// reported (it withdraws only a record no host has reported).
		if err := os.Rename(rollbackPath(a.cfg.StateDir), reportedRollbackPath(a.cfg.StateDir)); err != nil {
			a.cfg.Log.Error("noting the rollback reported", "err", err)
		}
	default:
		_ = os.Remove(rollbackPath(a.cfg.StateDir))
	}
}

// pendingRollback is the rollback the launcher handed this host to
// report: its record in the state dir, or (fromEnv) the one it could not
// write there, in MESH_ROLLBACK.
func pendingRollback(stateDir string) (rb rollback, fromEnv, ok bool) {
	if readJSON(rollbackPath(stateDir), &rb) == nil {
		return rb, false, true
	}
	rb = rollback{}
	s := os.Getenv(EnvRollback)
	if s == "" || json.Unmarshal([]byte(s), &rb) != nil {
		return rollback{}, false, false
	}
	return rb, true, true
}

// refuseRolledBack refuses the releases a rollback record names.
func (a *Agent) refuseRolledBack(rb rollback) {
	for _, dg := range append([]string{rb.Digest}, rb.Also...) {
		if dg != "" && !slices.Contains(a.state.RefusedReleases, dg) {
			a.state.RefusedReleases = append(a.state.RefusedReleases, dg)
		}
	}
}

func (a *Agent) once(key, format string, args ...any) {
	if a.said == nil {
		a.said = map[string]bool{}
	}
	if a.said[key] {
		return
	}
	a.said[key] = true
	a.cfg.Log.Warn(fmt.Sprintf(format, args...))
}

func copyFile(from, to string, perm os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	b, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	return writeFileAtomic(to, b, perm)
}

// launcherVersion is the version of the launcher running this host, as
// its launcher.json says (it changes under a running host when the
// launcher re-executes itself as a release); empty without a launcher.
func (a *Agent) launcherVersion() string {
	if os.Getenv(EnvLauncher) == "" {
		return ""
	}
	var st launcherState
	if err := readJSON(launcherPath(a.cfg.StateDir), &st); err != nil {
		return ""
	}
	return st.Launcher
}

// confirmLauncher runs after each poll that reached the controller: while
// a launcher is on trial (re-executed into a release, with this host
// adopted), it leaves the launcher-reconciled-<version> marker that
// completes that trial — the host it runs still reaches the controller.
func (a *Agent) confirmLauncher() {
	if os.Getenv(EnvLauncher) == "" {
		return
	}
	var st launcherState
	if err := readJSON(launcherPath(a.cfg.StateDir), &st); err != nil || st.LauncherTrial == nil || st.Launcher != st.LauncherTrial.Version {
		return
	}
	m := launcherMarkerPath(a.cfg.StateDir, st.LauncherTrial.Version)
	if _, err := os.Stat(m); err == nil {
		return
	}
	if err := writeFileAtomic(m, []byte(st.LauncherTrial.Version+"\n"), 0o600); err != nil {
		a.cfg.Log.Error("writing the launcher's marker", "err", err)
		return
	}
	a.cfg.Log.Info("reached the controller under the launcher on trial", "launcher", st.LauncherTrial.Version)
}
