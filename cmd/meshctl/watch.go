package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// group is one tier of a plan or one wave of a rollout, as its bar shows it.
type group struct {
	name   string
	total  int
	done   int // applied, upgraded
	busy   int // sent, upgrading
	failed int
}

func (g group) words() string {
	var s []string
	if g.busy > 0 {
		s = append(s, fmt.Sprintf("%d in progress", g.busy))
	}
	if g.failed > 0 {
		s = append(s, fmt.Sprintf("%d failed", g.failed))
	}
	return strings.Join(s, ", ")
}

// progress shows a watched plan or rollout: bars on a terminal, a line per
// change elsewhere (a script's log, a test).
type progress interface {
	show(status string, gs []group)
	// end stops drawing; a bar not complete is marked halted.
	end()
}

func newProgress(w io.Writer, title string) progress {
	if isTerminal(w) {
		return newBars(w, title)
	}
	return &lines{w: w, title: title}
}

// lines prints the whole picture again whenever it changes.
type lines struct {
	w     io.Writer
	title string
	last  string
}

func (l *lines) show(status string, gs []group) {
	parts := []string{l.title + " " + status}
	for _, g := range gs {
		p := fmt.Sprintf("%s %d/%d", g.name, g.done, g.total)
		if w := g.words(); w != "" {
			p += " (" + w + ")"
		}
		parts = append(parts, p)
	}
	s := strings.Join(parts, "; ")
	if s != l.last {
		fmt.Fprintln(l.w, s)
		l.last = s
	}
}

func (l *lines) end() {}

// bars draws one mpb bar per group, under a status line.
type bars struct {
	p      *mpb.Progress
	mu     sync.Mutex
	status string
	bars   []*mpb.Bar
	words  []string
}

func newBars(w io.Writer, title string) *bars {
	b := &bars{p: mpb.New(mpb.WithOutput(w), mpb.WithWidth(80), mpb.WithRefreshRate(150*time.Millisecond))}
	// The first bar carries the status line: a bar of no length, which
	// shows only its decorators.
	head, _ := b.p.Add(0, nil, mpb.PrependDecorators(decor.Name(title+" "), decor.Any(func(decor.Statistics) string {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.status
	})))
	b.bars = append(b.bars, head)
	b.words = append(b.words, "")
	return b
}

func (b *bars) show(status string, gs []group) {
	// Bars are added outside the lock: mpb's renderer calls the
	// decorators, which take it. Only this goroutine touches b.bars.
	for len(b.bars) <= len(gs) {
		i := len(b.bars)
		b.mu.Lock()
		b.words = append(b.words, "")
		b.mu.Unlock()
		bar := b.p.AddBar(int64(max(gs[i-1].total, 1)),
			mpb.PrependDecorators(decor.Name(gs[i-1].name, decor.WCSyncSpaceR), decor.CountersNoUnit("%d/%d", decor.WCSyncSpace)),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
				b.mu.Lock()
				defer b.mu.Unlock()
				return b.words[i]
			})),
			mpb.BarFillerOnAbort("stopped"))
		b.bars = append(b.bars, bar)
	}
	b.mu.Lock()
	b.status = status
	for i, g := range gs {
		b.words[i+1] = g.words()
	}
	b.mu.Unlock()
	for i, g := range gs {
		if g.total > 0 {
			b.bars[i+1].SetCurrent(int64(g.done))
		}
	}
}

func (b *bars) end() {
	for i, bar := range b.bars {
		switch {
		case i == 0:
			bar.SetTotal(-1, true) // the status line, drawn one last time
		case !bar.Completed():
			bar.Abort(false)
		}
	}
	b.p.Wait()
}

// poll calls step every interval until it says the watch is over, or ctx
// ends. A request that fails on the way or with a 5xx is retried, up to
// ten in a row, so a controller restarting under a watch does not end it.
func poll(ctx context.Context, interval time.Duration, errOut io.Writer, step func() (bool, error)) error {
	const tolerated = 10
	misses := 0
	for {
		over, err := step()
		if err == nil && over {
			return nil
		}
		if err != nil {
			// A problem the controller states (404, 403, …) ends the
			// watch; a 5xx (a replica draining, a store timeout) may pass.
			if p, ok := err.(*problemError); ok && p.Status < 500 {
				return err
			}
			var other *notTheAPI
			if errors.As(err, &other) {
				return err // not the controller: asking again changes nothing
			}
			if misses++; misses >= tolerated {
				return err
			}
			fmt.Fprintf(errOut, "meshctl: %v (trying again)\n", err)
		} else {
			misses = 0
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("watch stopped: %w", ctx.Err())
		case <-time.After(interval):
		}
	}
}
