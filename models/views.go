package models

import (
	"sync/atomic"
	"time"
)

// Key purposes: what a stored key signs.
const (
	KeyDeclaration = "declaration" // declarations and release statements
	KeyToken       = "token"       // JWTs of people and hosts
)

// The shapes the store reads and the API shows: a record with what the
// store joins to it. They are plain data, shared by store, service, api
// and web.

// SendView is a send with the outcome its reports give.
type SendView struct {
	Send
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
}

// PendingSend is what was sent of a machine's current generation: how
// often, the newest send's time and instance.
type PendingSend struct {
	N        int
	At       time.Time
	Instance string
}

// AssignmentView is an assignment as the API shows it.
type AssignmentView struct {
	Module string `json:"module"`
	Build  *int64 `json:"build,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Composed is the one declaration of a machine at a generation, ready to send.
type Composed struct {
	MachineID  int64
	Machine    string
	Generation int64
	Digest     string
	// Envelope is the single-signature envelope, empty until first
	// needed; Batch the batch envelope (nil for declarations composed
	// before batches). EnvelopeFor picks a poll's.
	Envelope []byte
	Batch    []byte
	Trigger  string
	Schema   int
	HeldBack string
}

// EnvelopeFor is the envelope a poll gets: the batch one for a host that
// verifies batches (when there is one), else the single-signature one;
// nil when that one is not signed yet (the caller signs it first).
func (c *Composed) EnvelopeFor(batch bool) []byte {
	if batch && len(c.Batch) > 0 {
		return c.Batch
	}
	if len(c.Envelope) > 0 {
		return c.Envelope
	}
	return nil
}

// Sealed is an envelope that carries the payload, either format.
func (c *Composed) Sealed() []byte {
	if len(c.Envelope) > 0 {
		return c.Envelope
	}
	return c.Batch
}

// Signer signs declaration payloads.
type Signer interface {
	KeyID() string
	Sign(payload []byte) []byte
}

// ComposeError is why a machine's generation could not be composed.
type ComposeError struct {
	Generation int64
	Err        error
}

func (e *ComposeError) Error() string { return e.Err.Error() }

func (e *ComposeError) Unwrap() error { return e.Err }

// ComposeFailure is why one machine's generation could not be composed.
type ComposeFailure struct {
	MachineID  int64
	Machine    string
	Generation int64
	Reason     string
}

// PlanView is a plan with its steps.
type PlanView struct {
	Plan
	Steps []PlanStep `json:"steps"`
	// HostStep is the rollout of the plan's host release (nil: the plan
	// has no host step).
	HostStep *RolloutView `json:"host_step"`
	// PinnedAside are the module's machines a person pins to a build now,
	// which no plan moves, so they are no step of this one: a plan done
	// said its build current while they ran another, and nothing said so.
	PinnedAside []PinnedAside `json:"pinned_aside"`
}

// PinnedAside is a machine a person pinned to a build of a plan's module.
type PinnedAside struct {
	Machine string `json:"machine"`
	Build   int64  `json:"build"`
	Reason  string `json:"reason"`
}

// MaxPinnedAside is the most pinned machines a plan's view lists.
const MaxPinnedAside = 100

// Push is what a push webhook says.
type Push struct {
	Ref    string
	Commit string
	// Before is the commit the push was made onto, '' when it named none
	// (a new branch).
	Before     string
	Repository string
	Author     string
	Paths      []string
}

// Claimed is a queued build a builder took.
type Claimed struct {
	ID         int64  `json:"id"`
	Module     string `json:"module"`
	Number     int64  `json:"number"`
	Commit     string `json:"commit"`
	Repository string `json:"repository"`
}

// DeliveryOutcome is what a webhook delivery came to.
type DeliveryOutcome struct {
	Status string        `json:"status"`
	Merge  *int64        `json:"merge"`
	Builds []QueuedBuild `json:"builds"`
	// Replay: the delivery was received before and nothing was written
	// of it again (its record is the caller's, kept to a row a minute).
	Replay bool `json:"-"`
}

// QueuedBuild is a build a merge queued.
type QueuedBuild struct {
	Module string `json:"module"`
	Number int64  `json:"number"`
}

// RolloutView is a rollout with its machines.
type RolloutView struct {
	Rollout
	Machines []RolloutMachine `json:"machines"`
}

// Behind says why a controller is behind its store ("" while it is not):
// set at start and again at each heartbeat (a newer build may migrate the
// store under a running one), and read by the API and the dashboard alike.
type Behind struct{ why atomic.Pointer[string] }

// Set records why ("" when no longer behind).
func (b *Behind) Set(why string) { b.why.Store(&why) }

// Why is the reason, "" when not behind (or b is nil).
func (b *Behind) Why() string {
	if b == nil {
		return ""
	}
	if p := b.why.Load(); p != nil {
		return *p
	}
	return ""
}
