package models

import (
	"database/sql/driver"
	"fmt"
	"net/netip"
	"strings"
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
	ID            int64  `gorm:"primaryKey" json:"-"`
	Name          string `json:"name"`
	Kind          string `json:"kind"`
	Repository    string `json:"repository"`
	DefaultBranch string `json:"default_branch"`
	Secret        string `json:"-"`
	// AllowedFrom are the addresses its webhooks may come from (none:
	// any); a delivery from elsewhere is refused before its body is read.
	AllowedFrom AllowedFrom `gorm:"column:allowed_from;type:text" json:"allowed_from"`
	CreatedAt   time.Time   `json:"created_at"`
}

// MaxAllowedFrom is the most addresses and prefixes a source lists.
const MaxAllowedFrom = 64

// AllowedFrom are the addresses a source's webhooks may come from: IPs and
// CIDR prefixes (a forge publishes its own: GitHub's "hooks" in
// https://api.github.com/meta; a Gitea or Forgejo is where it runs). None
// allows any address. Stored comma-separated.
type AllowedFrom []string

// ParseAllowedFrom checks and normalises what a person gave: each an
// address or a prefix, at most MaxAllowedFrom.
func ParseAllowedFrom(field string, in []string) (AllowedFrom, error) {
	if len(in) > MaxAllowedFrom {
		return nil, Invalid(field, fmt.Sprintf("at most %d addresses or prefixes", MaxAllowedFrom))
	}
	out := AllowedFrom{}
	for i, a := range in {
		a = strings.TrimSpace(a)
		if p, err := netip.ParsePrefix(a); err == nil {
			if p.Addr().Is4In6() {
				// A sender's address is compared as IPv4 when it is one:
				// an IPv4-mapped prefix would match none.
				if p.Bits() < 96 {
					return nil, Invalid(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("%q mixes IPv4-mapped and other IPv6 addresses: give the IPv4 prefix", EscapeLogLine(a, 64)))
				}
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked().String())
			continue
		}
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			return nil, Invalid(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("%q is neither an IP address nor a CIDR prefix (192.0.2.10, 140.82.112.0/20, 2001:db8::/32)", EscapeLogLine(a, 64)))
		}
		out = append(out, ip.Unmap().String())
	}
	return out, nil
}

// Allows says whether a delivery from address ip may be taken.
func (a AllowedFrom) Allows(ip string) bool {
	if len(a) == 0 {
		return true
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, s := range a {
		if p, err := netip.ParsePrefix(s); err == nil && p.Contains(addr) {
			return true
		}
		if one, err := netip.ParseAddr(s); err == nil && one == addr {
			return true
		}
	}
	return false
}

// Value stores the list comma-separated.
func (a AllowedFrom) Value() (driver.Value, error) { return strings.Join(a, ","), nil }

// Scan reads the stored list; empty is none (listed as [], not null).
func (a *AllowedFrom) Scan(v any) error {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case []byte:
		s = string(v)
	case nil:
	default:
		return fmt.Errorf("allowed_from: cannot read %T", v)
	}
	*a = AllowedFrom{}
	if s != "" {
		*a = strings.Split(s, ",")
	}
	return nil
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
	ID         int64  `gorm:"primaryKey" json:"id"`
	SourceID   int64  `json:"-"`
	Repository string `json:"repository"`
	Commit     string `gorm:"column:source_commit" json:"commit"`
	// Before is the commit the push was made onto ('' when it named none).
	Before    string    `gorm:"column:before_commit" json:"-"`
	Author    string    `json:"author"`
	Paths     string    `json:"-"` // JSON array
	CreatedAt time.Time `json:"created_at"`
}
