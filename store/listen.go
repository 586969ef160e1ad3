package store

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"mesh/models"
)

// Listen feeds bumps that other instances committed to f: a dedicated
// PostgreSQL connection LISTENs on the store's channel. When the connection
// drops it reconnects with backoff and calls resync (notifications sent
// meanwhile are lost; resync reads the store). ready is closed once the
// first LISTEN is in place. On SQLite there is one instance: it returns
// at once after closing ready.
func (s *Store) Listen(ctx context.Context, url string, f func([]models.Bump), resync func(), ready chan<- struct{}, log *slog.Logger) {
	if s.dialect != Postgres {
		close(ready)
		return
	}
	backoff := 100 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, url, f, func() {
			backoff = 100 * time.Millisecond
			if first {
				first = false
				close(ready)
			} else {
				resync()
			}
		})
		if ctx.Err() != nil {
			return
		}
		log.Warn("listener connection lost; reconnecting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (s *Store) listenOnce(ctx context.Context, url string, f func([]models.Bump), listening func()) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+s.channel); err != nil {
		return fmt.Errorf("LISTEN: %w", err)
	}
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if r, ok := parseRevoked(n.Payload); ok {
			s.announceRevoked([]models.Revocation{r})
			continue
		}
		if s.announceHostInfo(n.Payload) {
			continue
		}
		if bs := ParseNotification(n.Payload); len(bs) > 0 {
			f(bs)
		}
	}
}
