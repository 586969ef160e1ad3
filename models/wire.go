package models

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"time"
)

// SchemaV1 is the first declaration schema (see schema.go for the others).
const SchemaV1 = 1

// Envelope is the poll's 200 body: the exact payload bytes and their
// signatures. A host verifies the bytes first and decodes second.
type Envelope struct {
	Payload    []byte      `json:"payload"` // base64 in JSON
	Signatures []Signature `json:"signatures"`
}

// Signature is an ed25519 signature over the payload bytes by key KeyID.
type Signature struct {
	KeyID string `json:"key_id"`
	Sig   []byte `json:"sig"`
}

// MaxGeneration is the furthest a resolve moves a machine to get past
// its host's generation: a trillion bumps short of the top of int64. A
// host may say any generation (a store restored from a backup sent it
// one past what the store now holds), and a resolve moves its machine
// past it; one said at the top of int64 left no room for that bump, and
// the machine, and every change touching it, failed for good. A host
// past MaxGeneration only has its conflict cleared (Store.Resolve): it is
// in conflict again while it says so, and served once reset.
const MaxGeneration int64 = math.MaxInt64 - 1<<40

// DeclarationPayload is the declaration itself (wire contract v1). Field
// order is fixed by this struct, so the same content marshals to the same bytes.
type DeclarationPayload struct {
	Schema     int          `json:"schema"`
	Machine    string       `json:"machine"`
	Generation int64        `json:"generation"`
	ComposedAt time.Time    `json:"composed_at"`
	ComposedBy string       `json:"composed_by"`
	EmptyOK    bool         `json:"empty_ok"`
	Host       *HostRelease `json:"host"`
	Resources  []Resource   `json:"resources"`
}

// HostRelease is the target host release as a declaration names it.
type HostRelease struct {
	Version   string `json:"version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	URL       string `json:"url"`
	KeyID     string `json:"key_id"`
	Signature []byte `json:"signature"`
}

// Resource is one thing a declaration makes true on the machine.
type Resource struct {
	ID       string            `json:"id"`
	Module   string            `json:"module"`
	Build    int64             `json:"build"`
	Kind     string            `json:"kind"`
	Path     string            `json:"path,omitempty"`
	Artifact *Artifact         `json:"artifact,omitempty"`
	Content  *string           `json:"content,omitempty"`
	Mode     string            `json:"mode,omitempty"`
	Command  []string          `json:"command,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	After    []string          `json:"after,omitempty"`
	Check    *Check            `json:"check,omitempty"`
	OnRemove string            `json:"on_remove,omitempty"`

	// Schema 2, a certificate: Path is the chain's file, KeyPath the key's,
	// Mode the key file's mode. omitempty keeps schema-1 bytes as they were.
	Names    []string  `json:"names,omitempty"`
	KeyPath  string    `json:"key_path,omitempty"`
	Owner    string    `json:"owner,omitempty"`
	Lifetime string    `json:"lifetime,omitempty"`
	OnRenew  []OnRenew `json:"on_renew,omitempty"`

	// raw is this resource's JSON when composing encoded it once for
	// every machine of a batch (SharedParts); DeclarationPayload.Marshal
	// splices it in. Never set on a resource decoded or changed since.
	raw []byte
}

// ResourceCertificate is the schema-2 resource kind: a certificate from the
// mesh CA for a service on the machine, its key made there and kept there.
const ResourceCertificate = "certificate"

// OnRenew is what a renewed certificate does to a service: restart it, or
// send it Signal (HUP, USR1, USR2) when one is named.
type OnRenew struct {
	Service string `json:"service"`
	Signal  string `json:"signal,omitempty"`
}

// Artifact is a content-addressed blob a resource needs.
type Artifact struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	URL    string `json:"url"`
}

// Check is a health check of a service: exactly one of TCP, HTTP, Exec
// or (schema 2) TLS, a handshake to an address whose chain must verify
// against the mesh CA for ServerName.
type Check struct {
	TCP      string   `json:"tcp,omitempty"`
	HTTP     string   `json:"http,omitempty"`
	Status   int      `json:"status,omitempty"`
	Exec     []string `json:"exec,omitempty"`
	Interval string   `json:"interval,omitempty"`
	Timeout  string   `json:"timeout,omitempty"`

	TLS        string `json:"tls,omitempty"`
	ServerName string `json:"server_name,omitempty"`
}

// Report outcomes, action words and machine states (DESIGN.md's words).
const (
	OutcomeApplied    = "applied"
	OutcomeRefused    = "refused"
	OutcomeFailed     = "failed"
	OutcomeRejected   = "rejected"
	OutcomeUpgraded   = "upgraded"
	OutcomeRolledBack = "rolled_back"
	// OutcomeChecked: a check changed between applies; it names the
	// applied send and never moves the applied or finished generation.
	OutcomeChecked = "checked"
	// OutcomeRenewed: a certificate resource was renewed between applies
	// (two thirds into its lifetime); it names the applied send and, like
	// checked, never moves the applied or finished generation.
	OutcomeRenewed = "renewed"

	StateCurrent    = "current"
	StateBehind     = "behind"
	StateRefused    = "refused"
	StateFailed     = "failed"
	StateRejected   = "rejected"
	StateConflict   = "conflict"
	StateOffline    = "offline"
	StateUpgrading  = "upgrading"
	StateRolledBack = "rolled_back"
	StateUnhealthy  = "unhealthy"
	StateRevoked    = "revoked"
)

// Health words: a fact with a time.
const (
	HealthPassing = "passing"
	HealthFailing = "failing"
	HealthNone    = "none" // no checks declared
)

// HostStateCheck names the host's own check among a report's checks: that
// its state dir takes writes. Only its failure is reported. The colon
// keeps it apart from every resource a declaration can name.
const HostStateCheck = "mesh-host:state-dir"

// ValidOutcome reports whether o is a report outcome.
func ValidOutcome(o string) bool {
	switch o {
	case OutcomeApplied, OutcomeRefused, OutcomeFailed, OutcomeRejected, OutcomeUpgraded, OutcomeRolledBack, OutcomeChecked, OutcomeRenewed:
		return true
	}
	return false
}

// FinalOutcome reports whether a report with outcome o ends the host's work on
// its generation (a `failed` attempt will be retried).
func FinalOutcome(o string) bool {
	return o == OutcomeApplied || o == OutcomeRefused || o == OutcomeRejected
}

// Report is what a host says after an apply attempt, refusal or upgrade.
type Report struct {
	Send        string `json:"send"`
	Generation  int64  `json:"generation"`
	Digest      string `json:"digest"`
	Outcome     string `json:"outcome"`
	Reason      string `json:"reason"`
	Attempt     int    `json:"attempt"`
	HostVersion string `json:"host_version"`
	// LauncherVersion is the version of the launcher running the host
	// (`mesh-host launch`), which follows the host release once that has
	// won its trial; empty for a host run without one.
	LauncherVersion string                  `json:"launcher_version,omitempty"`
	StartedAt       *time.Time              `json:"started_at,omitempty"`
	FinishedAt      *time.Time              `json:"finished_at,omitempty"`
	Actions         []Action                `json:"actions,omitempty"`
	Running         map[string]RunningBuild `json:"running,omitempty"`
	Checks          []CheckResult           `json:"checks,omitempty"`
	// Logs are the last lines of the services that failed, restarted or
	// turned unhealthy since the host's last report (ValidateLogs bounds
	// them).
	Logs []ServiceLog `json:"logs,omitempty"`
	// HostNow is the host's clock as the report left (HostTimeHeader),
	// nil when it did not say: not part of the body.
	HostNow *time.Time `json:"-"`
	// Late says the store found this report, of the generation its
	// machine finished, older than the machine's last word: of an
	// earlier send than that word's, or a failed attempt of the same
	// send after it — a copy committed late (a retry after a timeout on
	// a slow instance). It is kept as a row and moves nothing.
	Late bool `json:"-"`
}

// HostTimeHeader carries the host's clock as a report leaves it (RFC 3339).
const HostTimeHeader = "X-Mesh-Host-Time"

// OnControllerClock moves the times of r's checks from the host's clock
// to the controller's: HostNow is the host's clock as the report left
// (HostTimeHeader), now the controller's as it arrived. A check's time
// is when a look found it failing, and becomes when that check began
// failing: read on a host clock five minutes behind, a check failing for
// a second was taken as failing five minutes, past the grace. What the
// difference cannot tell (the request's flight) is under a second, and
// errs towards later, keeping the grace. Its body is stored as sent.
func (r *Report) OnControllerClock(now time.Time) {
	if r.HostNow == nil {
		return // a host of a release before it: its times as they are
	}
	skew := r.HostNow.Sub(now)
	for i := range r.Checks {
		if !r.Checks[i].At.IsZero() {
			r.Checks[i].At = r.Checks[i].At.Add(-skew)
		}
	}
	r.HostNow = nil // moved once, whatever retries the transaction
}

// Action is what an apply did to one resource.
type Action struct {
	Resource string `json:"resource"`
	Action   string `json:"action"`
	Digest   string `json:"digest,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// Words says an action as a sentence: "created node-tools.runtime
// (node-tools): 239 file(s), run by node-tools.service". The journal
// and the dashboard say it the same way.
func (a Action) Words() string {
	mod, _, _ := strings.Cut(a.Resource, ".")
	s := fmt.Sprintf("%s %s (%s)", a.Action, a.Resource, mod)
	if a.Detail != "" {
		s += ": " + a.Detail
	}
	if a.Digest != "" {
		d := a.Digest
		if len(d) > 19 {
			d = d[:19]
		}
		s += " [" + d + "]"
	}
	return s
}

// RunningBuild is the build of a module a host runs.
type RunningBuild struct {
	Build  int64  `json:"build"`
	Digest string `json:"digest,omitempty"`
}

// CheckResult is one run of a service's check.
type CheckResult struct {
	Resource string    `json:"resource"`
	OK       bool      `json:"ok"`
	At       time.Time `json:"at"`
	Detail   string    `json:"detail,omitempty"`
}

// DigestOf is the content address of b: "sha256:" + hex.
func DigestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// ValidDigest reports whether d has the form sha256:<64 lowercase hex>,
// the only form DigestOf makes. Uppercase hex was accepted once: such a
// digest named no blob, and a host fetching it never saw its bytes match.
func ValidDigest(d string) bool {
	if len(d) != 71 || d[:7] != "sha256:" {
		return false
	}
	for _, c := range d[7:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// BlobURL is where a blob is served.
func BlobURL(digest string) string { return "/api/v1/blobs/" + digest }
