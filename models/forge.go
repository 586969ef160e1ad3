package models

import (
	"fmt"
	"time"
)

// Forge kinds.
const (
	ForgeGitea   = "gitea"
	ForgeForgejo = "forgejo"
	ForgeGitHub  = "github"
)

// Build states: a build queued from a merge waits for a builder.
const (
	BuildQueued   = "queued"
	BuildBuilding = "building"
	BuildReady    = "ready"
	// BuildFailed: the builder sent content that can never be accepted
	// (a manifest that does not parse); it is never claimed again.
	BuildFailed = "failed"
	// BuildYanked: an operator marked a finished build bad. Machines that
	// run it keep it; it is never planned, pinned or made current again.
	BuildYanked = "yanked"
)

// Usable says whether a build may be made current, planned or pinned:
// only a finished one that was not yanked. The error says why not.
func (b *Build) Usable() error {
	switch b.State {
	case BuildReady, "":
		return nil
	case BuildYanked:
		return fmt.Errorf("%w: build %d is yanked (%s)", ErrConflict, b.Number, b.YankReason)
	default:
		return fmt.Errorf("%w: build %d is %s, not finished", ErrNotFound, b.Number, b.State)
	}
}

// Source is a forge repository whose webhooks the controller accepts.
type Source struct {
	ID            int64     `gorm:"primaryKey" json:"-"`
	Name          string    `json:"name"`
	Kind          string    `json:"kind"`
	Repository    string    `json:"repository"`
	DefaultBranch string    `json:"default_branch"`
	Secret        string    `json:"-"`
	CreatedAt     time.Time `json:"created_at"`
}

// Delivery is one webhook delivery, kept so a replay is never acted on twice.
type Delivery struct {
	ID         int64 `gorm:"primaryKey"`
	SourceID   int64
	DeliveryID string
	Event      string
	Status     string
	ReceivedAt time.Time
}

// Merge is a push to a repository's default branch.
type Merge struct {
	ID         int64     `gorm:"primaryKey" json:"id"`
	SourceID   int64     `json:"-"`
	Repository string    `json:"repository"`
	Commit     string    `gorm:"column:source_commit" json:"commit"`
	Author     string    `json:"author"`
	Paths      string    `json:"-"` // JSON array
	CreatedAt  time.Time `json:"created_at"`
}
