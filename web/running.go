package web

import (
	"context"
	"sort"
	"strings"

	"mesh/models"
)

// RunningRow is a build a machine reports running; Yanked holds the
// reason when the build was yanked since (the machine keeps it).
type RunningRow struct {
	Module string
	Build  int64
	Yanked string
}

// fillRunning fills what the machine runs (yanked builds marked) and its labels.
func (s *Server) fillRunning(ctx context.Context, d *MachineDetail, m *models.Machine) error {
	running, err := m.RunningBuilds()
	if err != nil {
		return err
	}
	yanked, err := s.Store.YankedBuilds(ctx)
	if err != nil {
		return err
	}
	reasons := map[string]string{}
	for _, y := range models.YankedRunning(running, yanked) {
		reasons[y.Module] = y.Reason
		if reasons[y.Module] == "" {
			reasons[y.Module] = "no reason given"
		}
	}
	for mod, r := range running {
		d.Running = append(d.Running, RunningRow{Module: mod, Build: r.Build, Yanked: reasons[mod]})
	}
	sort.Slice(d.Running, func(i, j int) bool { return d.Running[i].Module < d.Running[j].Module })
	labels, _, err := s.Store.Labels(ctx, m.Name)
	if err != nil {
		return err
	}
	var ls []string
	for _, k := range models.SortedLabelKeys(labels) {
		ls = append(ls, k+"="+labels[k])
	}
	d.Labels = strings.Join(ls, ", ")
	return nil
}
