package auth

import (
	"sync"
	"time"
)

// LastUseEvery is how often an API token's last use is recorded at most.
const LastUseEvery = time.Minute

// LastUse remembers when API tokens were used, in memory, so a request
// never writes to the store: the controller flushes what it holds once a
// minute, and a token used all the time is noted once a minute.
type LastUse struct {
	mu      sync.Mutex
	noted   map[string]time.Time // id → last time noted (flushed or not)
	pending map[string]time.Time // id → not yet flushed
}

// NewLastUse is an empty memory.
func NewLastUse() *LastUse {
	return &LastUse{noted: map[string]time.Time{}, pending: map[string]time.Time{}}
}

// Seen notes a use of token id at now, unless it was noted in the last minute.
func (u *LastUse) Seen(id string, now time.Time) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if last, ok := u.noted[id]; ok && now.Sub(last) < LastUseEvery {
		return
	}
	u.noted[id] = now
	u.pending[id] = now
}

// Take returns the uses not yet flushed and forgets them; the caller writes
// them, and gives them back (Return) if the write fails.
func (u *LastUse) Take() map[string]time.Time {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	out := u.pending
	u.pending = map[string]time.Time{}
	if len(u.noted) > maxVerified {
		u.noted = map[string]time.Time{}
	}
	return out
}

// Return puts back uses Take gave whose write failed, unless newer ones
// were noted since.
func (u *LastUse) Return(uses map[string]time.Time) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for id, t := range uses {
		if t.After(u.pending[id]) {
			u.pending[id] = t
		}
	}
}
