package api

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"mesh/models"
)

// SendWriter writes send rows in groups: the rows of polls answered
// together go into one transaction (one fsync, not one per host), and each
// poll writes its response only after the transaction holding its row has
// committed.
type SendWriter struct {
	Store  SendStore
	Window time.Duration // how long a group stays open after its first row
	Max    int           // rows per group at most

	in      chan sendReq
	written atomic.Int64

	// byTrigger counts committed rows by trigger (mesh_sends_total). It is
	// touched once per committed group, by the writer, never by a poll
	// that sends nothing.
	mu        sync.Mutex
	byTrigger map[string]int64
}

// Written is how many send rows this writer has committed.
func (w *SendWriter) Written() int64 { return w.written.Load() }

// ByTrigger is how many send rows this writer has committed, by trigger.
func (w *SendWriter) ByTrigger() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int64, len(w.byTrigger))
	for k, n := range w.byTrigger {
		out[k] = n
	}
	return out
}

func (w *SendWriter) count(rows []models.Send) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byTrigger == nil {
		w.byTrigger = map[string]int64{}
	}
	for _, r := range rows {
		w.byTrigger[r.Trigger]++
	}
	w.written.Add(int64(len(rows)))
}

type sendReq struct {
	send models.Send
	done chan error
}

// NewSendWriter makes a writer; Run must be running for Write to return.
func NewSendWriter(st SendStore) *SendWriter {
	return &SendWriter{Store: st, Window: 3 * time.Millisecond, Max: 1000, in: make(chan sendReq, 1024)}
}

// Write records a send and returns once it is committed.
func (w *SendWriter) Write(ctx context.Context, s models.Send) error {
	r := sendReq{send: s, done: make(chan error, 1)}
	select {
	case w.in <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		// The row may still commit: a send on the record whose bytes never
		// left is harmless; bytes that left with no row are not.
		return ctx.Err()
	}
}

// Run groups and writes sends until ctx ends.
func (w *SendWriter) Run(ctx context.Context) {
	for {
		var first sendReq
		select {
		case <-ctx.Done():
			return
		case first = <-w.in:
		}
		group := []sendReq{first}
		timer := time.NewTimer(w.Window)
	collect:
		for len(group) < w.Max {
			select {
			case r := <-w.in:
				group = append(group, r)
			case <-timer.C:
				break collect
			}
		}
		timer.Stop()
		rows := make([]models.Send, len(group))
		for i, r := range group {
			rows[i] = r.send
		}
		err := w.Store.InsertSends(context.WithoutCancel(ctx), rows)
		var gone *models.MachinesGoneError
		if errors.As(err, &gone) {
			// Written, but for the rows of machines removed meanwhile:
			// their polls are answered as removed, the rest as written
			// (counted first, as a whole group is).
			written := rows[:0]
			for _, r := range group {
				if !gone.Machines[r.send.MachineID] {
					written = append(written, r.send)
				}
			}
			w.count(written)
			for _, r := range group {
				if gone.Machines[r.send.MachineID] {
					r.done <- fmt.Errorf("%w: machine %d was removed", models.ErrUnauthorized, r.send.MachineID)
				} else {
					r.done <- nil
				}
			}
			continue
		}
		if err == nil {
			w.count(rows)
		}
		for _, r := range group {
			r.done <- err
		}
	}
}
