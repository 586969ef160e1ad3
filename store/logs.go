package store

import (
	"context"
	"strings"

	"gorm.io/gorm/clause"

	"mesh/models"
)

// keepServiceLogs stores the lines a report carried as the latest of each
// resource, overwriting what an earlier report shipped (the report row
// keeps its own copy). Called in the transaction that stores the report.
func keepServiceLogs(tx *Tx, machineID int64, row *models.ReportRow, logs []models.ServiceLog) error {
	if len(logs) == 0 {
		return nil
	}
	rows := make([]models.ServiceLogRow, len(logs))
	for i, l := range logs {
		rows[i] = models.ServiceLogRow{MachineID: machineID, Resource: l.Resource, Why: l.Why,
			Lines: strings.Join(l.Lines, "\n"), Truncated: l.Truncated, ReportID: row.ID, Send: row.SendID,
			Generation: row.Generation, ShippedAt: row.CreatedAt}
	}
	if err := tx.Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "machine_id"}, {Name: "resource"}},
		DoUpdates: clause.AssignmentColumns([]string{"why", "lines", "truncated", "report_id", "send", "generation", "shipped_at"}),
	}).Create(&rows).Error; err != nil {
		return err
	}
	// A host names its resources: one shipping under ever new names would
	// grow the machine's rows (and its page, which shows them all) for
	// good. The latest MaxLogResources are kept.
	return tx.Exec(`DELETE FROM service_logs WHERE machine_id = ? AND resource NOT IN (
		SELECT resource FROM service_logs WHERE machine_id = ? ORDER BY shipped_at DESC, resource LIMIT ?)`,
		machineID, machineID, models.MaxLogResources).Error
}

// ServiceLogs is the latest lines a machine's host shipped of resource,
// or of every resource (by name) when resource is empty. A resource with
// none is not an error here: the caller says what that means.
func (s *Store) ServiceLogs(ctx context.Context, machineID int64, resource string) ([]models.ServiceLogRow, error) {
	var rs []models.ServiceLogRow
	q := s.db.WithContext(ctx).Where("machine_id = ?", machineID).Order("resource")
	if resource != "" {
		q = q.Where("resource = ?", resource)
	}
	return rs, mapErr(q.Find(&rs).Error)
}
