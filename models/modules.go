package models

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
)

// ETag names a module's settings as they stand (everything a PATCH changes,
// and its current build): a change answers 412 when the module changed
// since its author read it. A hash, so no version column is kept.
func (m *Module) ETag() string {
	h := sha256.New()
	cur := ""
	if m.CurrentBuild != nil {
		cur = strconv.FormatInt(*m.CurrentBuild, 10)
	}
	for _, f := range []string{m.Name, m.Kind, m.Repository, m.SourcePaths, m.Tiers,
		strconv.FormatInt(m.TierDeadlineSeconds, 10), m.OnFailure, m.Selector, cur} {
		fmt.Fprintf(h, "%d:%s;", len(f), f)
	}
	return `"m-` + hex.EncodeToString(h.Sum(nil)[:12]) + `"`
}
