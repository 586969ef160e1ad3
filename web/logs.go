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
		out[i] = LogBlock{Resource: v.Resource, Why: v.Why, Badge: badge, Text: strings.Join(v.Lines, "\n"), Truncated: v.Truncated,
			Shipped: stamp(v.ShippedAt), Ago: ago(v.ShippedAt, now), Generation: fmt.Sprint(v.Generation)}
	}
	return out, nil
}
