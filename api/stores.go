package api

import (
	"context"
	"io"
	"time"

	"mesh/models"
)

// The store as the API uses it, one small interface per aggregate
// (flightctl's per-aggregate store interfaces): the API reaches the store
// only through these and the service, so a handler can be tested with a
// fake and the API cannot grow a dependency on gorm.

// MachineStore is machines, their assignments and variables, and the host protocol's records.
type MachineStore interface {
	Machine(ctx context.Context, name string) (*models.Machine, error)
	MachineSent(ctx context.Context, name string) (*models.Machine, models.PendingSend, error)
	MachinesSent(ctx context.Context, limit int, cursor int64) ([]models.Machine, map[int64]models.PendingSend, error)
	MachinesInState(ctx context.Context, state string, rules models.StateRules, now time.Time, before int64, n, batch int,
		keep func(*models.Machine) bool) (ms []models.Machine, more bool, sent map[int64]models.PendingSend, err error)
	DeleteMachine(ctx context.Context, actor, name string) error
	Assignments(ctx context.Context, name string) ([]models.AssignmentView, *models.Machine, error)
	AssignmentsAndSelected(ctx context.Context, name string) (assigned, selected []models.AssignmentView, m *models.Machine, err error)
	SetAssignments(ctx context.Context, actor, name string, ifMatch *int64, as []models.AssignmentView) (*models.Machine, error)
	Variables(ctx context.Context, name string) (map[string]string, *models.Machine, error)
	Push(ctx context.Context, actor, name string, ifMatch *int64) (*models.Machine, error)
	Resolve(ctx context.Context, actor, name string) (*models.Machine, error)
	Enroll(ctx context.Context, tokenHash, name, os, arch, hostVersion, schema, tokenID string) (*models.Machine, error)
	RecordHostInfo(ctx context.Context, machineID int64, hostVersion, schema string) error
	CheckConflict(ctx context.Context, machineID int64, hostGen int64, finishedSend string) (conflict bool, gen int64, err error)
	SendMade(ctx context.Context, send string, machineID, gen int64) (bool, error)
	Compose(ctx context.Context, ids []int64, by string, signer models.Signer) (map[int64]*models.Composed, map[int64]error, error)
	SingleEnvelope(ctx context.Context, c *models.Composed, signer models.Signer) (*models.Composed, error)
	InsertReport(ctx context.Context, machineID int64, r *models.Report, body []byte) (*models.ReportRow, error)
	BlobSent(ctx context.Context, machineID int64, digest string) (bool, error)
	OpenBlob(ctx context.Context, digest string) (*models.Blob, io.ReadSeeker, error)
}

// ModuleStore is modules, builds and plans.
type ModuleStore interface {
	Module(ctx context.Context, name string) (*models.Module, error)
	Modules(ctx context.Context, limit int, cursor int64) ([]models.Module, error)
	CreateModule(ctx context.Context, actor string, m *models.Module) error
	Build(ctx context.Context, module string, number int64) (*models.Build, error)
	Builds(ctx context.Context, module string, limit int, cursor int64) ([]models.Build, *models.Module, error)
	SetCurrent(ctx context.Context, actor, module string, number int64, reason string) (int, error)
	Plan(ctx context.Context, id int64) (*models.PlanView, error)
	Plans(ctx context.Context, limit int, cursor int64) ([]models.PlanView, error)
	ActOnPlan(ctx context.Context, actor string, id int64, action string, seen models.PlanSeen) (*models.PlanView, error)
}

// ReleaseStore is host releases and rollouts.
type ReleaseStore interface {
	Releases(ctx context.Context, limit int, cursor int64) ([]models.Release, error)
	// HostDefault is the fleet's default host version ("" when none).
	HostDefault(ctx context.Context) (string, error)
	Rollout(ctx context.Context, version string) (*models.RolloutView, error)
	StartRollout(ctx context.Context, actor, version, canary string, maxInFlight, deadline int64) (*models.RolloutView, error)
	SetRolloutState(ctx context.Context, actor, version, action string) (*models.RolloutView, error)
}

// ForgeStore is forge sources, deliveries and builders' claims.
type ForgeStore interface {
	Source(ctx context.Context, name string) (*models.Source, error)
	Sources(ctx context.Context) ([]models.Source, error)
	CreateSource(ctx context.Context, actor string, src *models.Source) error
	SetSourceAllowedFrom(ctx context.Context, actor, name string, from models.AllowedFrom) (*models.Source, error)
	Deliver(ctx context.Context, src *models.Source, deliveryID, event string, push *models.Push, status string) (*models.DeliveryOutcome, error)
	ClaimBuild(ctx context.Context, builder string, lease time.Duration, hostModules bool) (*models.Claimed, error)
	BuildModule(ctx context.Context, id int64) (*models.Module, error)
}

// AccessStore is join tokens, users and keys.
type AccessStore interface {
	CreateJoinToken(ctx context.Context, actor, hash string, expires time.Time) error
	JoinTokens(ctx context.Context, limit int, cursor int64) ([]models.JoinToken, error)
	CreateUser(ctx context.Context, actor string, u *models.User) error
	Users(ctx context.Context, limit int, cursor int64) ([]models.User, error)
	Keys(ctx context.Context, purpose string) ([]models.Key, error)
	APITokens(ctx context.Context, user string, limit int, after string) ([]models.APIToken, error)
	APIToken(ctx context.Context, id string) (*models.APIToken, error)
}

// RecordStore is the record: audit, sends, reports, instances, the schema.
type RecordStore interface {
	Audit(ctx context.Context, actor, action, target, detail string) error
	AuditEventsWhere(ctx context.Context, limit int, cursor int64, f models.AuditFilter) ([]models.AuditEvent, error)
	Sends(ctx context.Context, machineID int64, limit int, cursor string) ([]models.SendView, error)
	Reports(ctx context.Context, machineID int64, limit int, cursor int64) ([]models.ReportRow, bool, error)
	Instances(ctx context.Context, limit int) ([]models.Instance, error)
	SchemaVersion(ctx context.Context) (store, known int64, err error)
	Statements() int64
}

// LogStore is the lines hosts shipped of their services.
type LogStore interface {
	ServiceLogs(ctx context.Context, machineID int64, resource string) ([]models.ServiceLogRow, error)
}

// FleetStore reads what the fleet's metrics are computed from.
type FleetStore interface {
	Fleet(ctx context.Context, afterPlan int64) (*models.Fleet, error)
}

// SendStore commits send rows in groups (the send writer).
type SendStore interface {
	InsertSends(ctx context.Context, sends []models.Send) error
}

// Store is every store interface the API uses.
type Store interface {
	MachineStore
	ModuleStore
	ReleaseStore
	ForgeStore
	AccessStore
	RecordStore
	FleetStore
	LogStore
	LabelStore
}
