package store

import (
	"context"
	"strings"
	"unicode/utf8"

	"mesh/models"
)

// audit records who did what in the transaction that did it.
func audit(tx *Tx, actor, action, target, detail string) error {
	return tx.Create(&models.AuditEvent{At: tx.s.Now(), Actor: auditWords(actor, models.MaxAuditTarget), Action: action,
		Target: auditWords(target, models.MaxAuditTarget), Detail: auditWords(detail, models.MaxAuditDetail)}).Error
}

// auditWords bounds what an audit row keeps of words that may come from
// outside (a refused host's resource, a webhook's ref): every row is
// shown whole on every page of the log, and is kept for good. PostgreSQL's
// TEXT takes neither NUL nor invalid UTF-8.
func auditWords(s string, limit int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\x00`)
	return models.Clip(s, limit)
}

// Audit records an event on its own (refusals, logins).
func (s *Store) Audit(ctx context.Context, actor, action, target, detail string) error {
	return s.write(ctx, func(tx *Tx) error { return audit(tx, actor, action, target, detail) })
}

// AuditEvents lists events newest first.
func (s *Store) AuditEvents(ctx context.Context, limit int, cursor int64) ([]models.AuditEvent, error) {
	return s.AuditEventsWhere(ctx, limit, cursor, models.AuditFilter{})
}

// AuditEventsWhere lists the events that match f, newest first. A target's
// events are found by the index on (target, id), so "what happened to
// machine/m1" does not read the whole log.
func (s *Store) AuditEventsWhere(ctx context.Context, limit int, cursor int64, f models.AuditFilter) ([]models.AuditEvent, error) {
	var es []models.AuditEvent
	q := s.db.WithContext(ctx).Order("id DESC").Limit(limit)
	if cursor > 0 {
		q = q.Where("id < ?", cursor)
	}
	if f.Target != "" {
		q = q.Where("target = ?", f.Target)
	}
	if f.Action != "" {
		q = q.Where("action = ?", f.Action)
	}
	if f.Actor != "" {
		// "user:alice" is also her API tokens' ("user:alice (API token
		// at-…)"), "controller" also its instances' ("controller:ctl-…").
		// Compared as written: SQLite's LIKE ignores ASCII case where
		// PostgreSQL's does not, so "USER:ADMIN" matched some of admin's
		// events on one store and none on the other.
		tokens, instances := f.Actor+" (", f.Actor+":"
		q = q.Where(`(actor = ? OR substr(actor, 1, ?) = ? OR substr(actor, 1, ?) = ?)`, f.Actor,
			utf8.RuneCountInString(tokens), tokens, utf8.RuneCountInString(instances), instances)
	}
	return es, mapErr(q.Find(&es).Error)
}
