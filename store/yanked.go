package store

import (
	"context"

	"mesh/models"
)

// YankedBuilds are every yanked build: module → build number → reason.
// Few builds are ever yanked, so views of machines read them whole.
func (s *Store) YankedBuilds(ctx context.Context) (map[string]map[int64]string, error) {
	var rows []struct {
		Module     string
		Number     int64
		YankReason string
	}
	err := s.db.WithContext(ctx).Table("builds").Select("modules.name AS module, builds.number, builds.yank_reason").
		Joins("JOIN modules ON modules.id = builds.module_id").Where("builds.state = ?", models.BuildYanked).Scan(&rows).Error
	if err != nil {
		return nil, mapErr(err)
	}
	out := map[string]map[int64]string{}
	for _, r := range rows {
		if out[r.Module] == nil {
			out[r.Module] = map[int64]string{}
		}
		out[r.Module][r.Number] = r.YankReason
	}
	return out, nil
}
