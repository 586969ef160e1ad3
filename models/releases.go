package models

import (
	"fmt"
	"time"
)

// Release is a host release as stored: a build of mesh-host for one
// os/arch, content-addressed and signed.
type Release struct {
	ID      int64  `gorm:"primaryKey" json:"-"`
	Version string `json:"version"`
	OS      string `gorm:"column:os" json:"os"`
	Arch    string `json:"arch"`
	Digest  string `json:"digest"`
	Size    int64  `json:"size"`
	// Schemas is the declaration schemas the release's host decodes,
	// canonical ("1,2"): what its poll must advertise once it runs.
	Schemas   string `json:"schemas"`
	KeyID     string `json:"key_id"`
	Signature []byte `json:"signature"`
	State     string `json:"state"` // ready or failed
	Failure   string `json:"failure"`
	// FailedAt is when the release failed on its platform, with Failure
	// (nil: not failed, or failed before this was recorded).
	FailedAt  *time.Time `json:"failed_at"`
	CreatedBy string     `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	// RolledOutAt is when a fleet rollout of the version finished done
	// having upgraded a machine of this platform. Only such a release carries the fleet
	// default to a machine without a target of its own: one uploaded for
	// another platform after its version became the default reaches that
	// platform's machines through a rollout, canary first, not all at
	// once at their next generation.
	RolledOutAt *time.Time `json:"rolled_out_at"`
	// FleetDefault says the release's version is the fleet's default now
	// (read with the list, not stored with the release).
	FleetDefault bool `gorm:"-" json:"fleet_default"`
}

// TableName keeps the table's name.
func (Release) TableName() string { return "host_releases" }

// Release states.
const (
	ReleaseReady  = "ready"
	ReleaseFailed = "failed"
)

// ReleaseStatement is the exact bytes a host release's signature covers.
func ReleaseStatement(version, os, arch, digest string) []byte {
	return fmt.Appendf(nil, "mesh-host-release/v1\n%s\n%s\n%s\n%s\n", version, os, arch, digest)
}

// Wire gives the declaration's host block for the release.
func (r *Release) Wire() *HostRelease {
	return &HostRelease{Version: r.Version, OS: r.OS, Arch: r.Arch, Digest: r.Digest, Size: r.Size,
		URL: BlobURL(r.Digest), KeyID: r.KeyID, Signature: r.Signature}
}

// Rollout states.
const (
	RolloutRunning   = "running"
	RolloutPaused    = "paused"
	RolloutDone      = "done"
	RolloutHalted    = "halted"
	RolloutCancelled = "cancelled"
)

// States of a machine in a rollout (DESIGN.md's words).
const (
	UpgradePending    = "pending"
	UpgradeUpgrading  = "upgrading"
	UpgradeUpgraded   = "upgraded"
	UpgradeRolledBack = "rolled_back"
	UpgradeFailed     = "failed"
	// UpgradeRefused: its host refused the release (it does not run under
	// the launcher, or could not verify it) — nothing is known of the
	// release itself.
	UpgradeRefused = "refused"
	// UpgradeStopped: the rollout halted while its host was upgrading
	// (another machine failed the release); its target was put back.
	UpgradeStopped = "stopped"
	// UpgradeWithdrawn: never reached — the rollout ended first (said of
	// a pending machine of a halted or cancelled rollout, not stored), or
	// the machine was revoked (stored, with why).
	UpgradeWithdrawn = "withdrawn"
)

// Rollout moves the fleet to a host release, wave by wave.
type Rollout struct {
	ID              int64      `gorm:"primaryKey" json:"id"`
	Version         string     `json:"version"`
	State           string     `json:"state"`
	Canary          string     `json:"canary"`
	MaxInFlight     int64      `json:"max_in_flight"`
	DeadlineSeconds int64      `json:"deadline_seconds"`
	Reason          string     `json:"reason"`
	CreatedBy       string     `json:"created_by"`
	CreatedAt       time.Time  `json:"created_at"`
	FinishedAt      *time.Time `json:"finished_at"`
	// PlanID is the plan whose host step this rollout is (0: a rollout of
	// the fleet). Such a rollout reaches only the plan's machines that
	// need it and leaves the fleet default as it is.
	PlanID int64 `json:"plan"`
}

// RolloutMachine is one machine's progress in a rollout.
type RolloutMachine struct {
	RolloutID  int64      `gorm:"primaryKey" json:"-"`
	MachineID  int64      `gorm:"primaryKey" json:"-"`
	Machine    string     `gorm:"-" json:"machine"`
	Wave       int64      `json:"wave"`
	State      string     `json:"state"`
	Previous   string     `json:"previous"`
	Reason     string     `json:"reason"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// MachineName is kept when the machine is deleted, so its place in
	// the rollout stays on the record under its name.
	MachineName string `json:"-"`
}

// Setting is a fleet-wide value (the default host release).
type Setting struct {
	Key   string `gorm:"primaryKey"`
	Value string
}

// SettingHostDefault names the fleet-wide default host version.
const SettingHostDefault = "host_default_version"

// TrialFailedError refuses the upgraded report of a trial the controller
// has already failed (its poll advertised other schemas than the release
// records, or it missed the rollout's deadline). Accepting it would let
// the launcher call the release known-good and keep the machine on a
// release whose rollout halted on it; refused (409), the trial never
// completes and the launcher puts known-good back at its deadline.
type TrialFailedError struct {
	Machine string
	Version string
	Reason  string // why the controller failed the trial
}

func (e *TrialFailedError) Error() string {
	return fmt.Sprintf("upgraded report refused: the trial of host release %s on machine %s failed (%s); the launcher puts the previous release back",
		e.Version, e.Machine, e.Reason)
}

// Unwrap makes errors.Is(err, ErrConflict) hold.
func (e *TrialFailedError) Unwrap() error { return ErrConflict }

// JudgeUpgraded says whether an upgraded report of host release version
// from machine is accepted, given the machine's newest rollout row for that
// version (nil: none). A trial the controller failed, or stopped when
// another machine failed the release, is refused; any other (in flight,
// already upgraded, or not part of a rollout) is accepted.
func JudgeUpgraded(machine, version string, rm *RolloutMachine) error {
	if rm == nil || rm.State != UpgradeFailed && rm.State != UpgradeStopped {
		return nil
	}
	return &TrialFailedError{Machine: machine, Version: version, Reason: rm.Reason}
}
