package web

import (
	"context"
	"time"

	"mesh/models"
)

// Store is the store as the dashboard reads it (the one change it makes,
// a push and a new assignment, and every other, go through the same
// workflows as the API). The dashboard reaches the store only through
// this and the service.
type Store interface {
	Overview(ctx context.Context, pick func(all []models.Machine) []int64) (all, shown []models.Machine, sent map[int64]models.PendingSend, err error)
	Assignments(ctx context.Context, name string) ([]models.AssignmentView, *models.Machine, error)
	AssignmentsAndSelected(ctx context.Context, name string) (assigned, selected []models.AssignmentView, m *models.Machine, err error)
	AuditEventsWhere(ctx context.Context, limit int, cursor int64, f models.AuditFilter) ([]models.AuditEvent, error)
	Builds(ctx context.Context, module string, limit int, cursor int64) ([]models.Build, *models.Module, error)
	Compose(ctx context.Context, ids []int64, by string, signer models.Signer) (map[int64]*models.Composed, map[int64]error, error)
	MachineSent(ctx context.Context, name string) (*models.Machine, models.PendingSend, error)
	Declaration(ctx context.Context, machineID, generation int64) (*models.Declaration, error)
	HostDefault(ctx context.Context) (string, error)
	LastUpgrade(ctx context.Context, machineID int64) (*models.RolloutMachine, string, error)
	Instances(ctx context.Context, limit int) ([]models.Instance, error)
	Machine(ctx context.Context, name string) (*models.Machine, error)
	Modules(ctx context.Context, limit int, cursor int64) ([]models.Module, error)
	Plan(ctx context.Context, id int64) (*models.PlanView, error)
	Plans(ctx context.Context, limit int, cursor int64) ([]models.PlanView, error)
	LivePlans(ctx context.Context, before int64, limit int) ([]models.PlanView, error)
	Push(ctx context.Context, actor, name string, ifMatch *int64) (*models.Machine, error)
	Releases(ctx context.Context, limit int, cursor int64) ([]models.Release, error)
	RecordSince(ctx context.Context) (*time.Time, error)
	Reports(ctx context.Context, machineID int64, limit int, cursor int64) ([]models.ReportRow, bool, error)
	Rollout(ctx context.Context, version string) (*models.RolloutView, error)
	Sends(ctx context.Context, machineID int64, limit int, cursor string) ([]models.SendView, error)
	SetAssignments(ctx context.Context, actor, name string, ifMatch *int64, as []models.AssignmentView) (*models.Machine, error)
	ActOnPlan(ctx context.Context, actor string, id int64, action string, seen models.PlanSeen) (*models.PlanView, error)
	SetCurrent(ctx context.Context, actor, module string, number int64, reason string) (int, error)
	Variables(ctx context.Context, name string) (map[string]string, *models.Machine, error)
	LogStore
	Labels(ctx context.Context, name string) (map[string]string, *models.Machine, error)
	YankedBuilds(ctx context.Context) (map[string]map[int64]string, error)
}
