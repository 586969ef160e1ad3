package web

import (
	"context"
	"fmt"
	"strings"
	"time"

	"mesh/models"
)

// LogBlock is one service's latest shipped lines as the machine page
// shows them.
type LogBlock struct {
	Resource   string
	Why        string
	Badge      string // the badge class: the state word a reason reads as
	Text       string
	Truncated  bool
	Shipped    string
	Ago        string
	Generation string
	// Past says what has happened since, when the lines are of an
	// earlier time than what the machine is now ("": they are current).
	Past string
}

// LogStore is the lines hosts shipped of their services.
type LogStore interface {
	ServiceLogs(ctx context.Context, machineID int64, resource string) ([]models.ServiceLogRow, error)
}

// logBlocks reads a machine's latest shipped lines, every service's.
func (s *Server) logBlocks(ctx context.Context, m *models.Machine, now time.Time) ([]LogBlock, error) {
	rows, err := s.Store.ServiceLogs(ctx, m.ID, "")
	if err != nil {
		return nil, err
	}
	out := make([]LogBlock, len(rows))
	for i := range rows {
		v := rows[i].View(0)
		badge := models.StateFailed
		if v.Why == models.LogUnhealthy {
			badge = models.StateUnhealthy
		}
		// Lines of an earlier time are not shown as the machine's state:
		// it applied a newer generation since, or its checks pass since.
		past := ""
		switch {
		case v.Generation < m.AppliedGeneration:
			past = fmt.Sprintf("before generation %d, applied since", m.AppliedGeneration)
		case m.Health == models.HealthPassing && m.HealthAt != nil && m.HealthAt.After(v.ShippedAt):
			past = "its checks pass since, as of its report " + ago(*m.HealthAt, now)
		}
		if past != "" {
			badge = "past"
		}
		out[i] = LogBlock{Resource: v.Resource, Why: v.Why, Badge: badge, Text: strings.Join(v.Lines, "\n"), Truncated: v.Truncated,
			Shipped: stamp(v.ShippedAt), Ago: ago(v.ShippedAt, now), Generation: fmt.Sprint(v.Generation), Past: past}
	}
	return out, nil
}
