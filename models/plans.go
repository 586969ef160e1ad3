package models

import "time"

// Plan states.
const (
	PlanRunning    = "running"
	PlanPaused     = "paused"
	PlanDone       = "done"
	PlanSuperseded = "superseded"
	PlanRefused    = "refused"
	PlanHalted     = "halted"
	PlanCancelled  = "cancelled"
)

// Plan step states.
const (
	StepPending = "pending"
	StepSent    = "sent"
	StepApplied = "applied"
	StepFailed  = "failed"
)

// Plan is a durable rollout of one build of a module, tier by tier. It
// records intent: a step makes the build a machine's target; the
// declaration is composed when the machine polls.
type Plan struct {
	ID         int64      `gorm:"primaryKey" json:"id"`
	ModuleID   int64      `json:"-"`
	Module     string     `gorm:"-" json:"module"`
	Build      int64      `json:"build"`
	State      string     `json:"state"`
	Reason     string     `json:"reason"`
	Tier       int64      `json:"tier"`
	CreatedBy  string     `json:"created_by"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// PlanStep is a plan's progress on one machine.
type PlanStep struct {
	PlanID     int64      `gorm:"primaryKey" json:"-"`
	MachineID  int64      `gorm:"primaryKey" json:"-"`
	Machine    string     `gorm:"-" json:"machine"`
	Tier       int64      `json:"tier"`
	State      string     `json:"state"`
	Generation int64      `json:"generation"`
	Reason     string     `json:"reason"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// MachineTarget is the build a plan has reached a machine with. It only
// ever rises: an older plan's step that runs late cannot lower it.
type MachineTarget struct {
	MachineID int64 `gorm:"primaryKey"`
	ModuleID  int64 `gorm:"primaryKey"`
	Build     int64
	PlanID    int64
}
