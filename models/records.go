package models

import (
	"time"

	"github.com/google/uuid"
)

// Trigger words: what made a generation (DESIGN.md, "send").
const (
	TriggerAssignment = "assignment"
	TriggerVariables  = "variables"
	TriggerCurrent    = "current"
	TriggerPush       = "push"
	TriggerPlan       = "plan"
	TriggerRollout    = "rollout"
	TriggerResolve    = "resolve"
	TriggerEnrol      = "enrol"
	// TriggerSchema: the schemas a machine's host advertises changed (an
	// upgrade, or a rollback to an older host), so it is composed afresh.
	TriggerSchema = "schema"
	// TriggerLabel: the machine's labels changed, or a module's selector,
	// and so the modules it should run.
	TriggerLabel = "label"
)

// Roles of a person (or a builder's token).
const (
	RoleViewer   = "viewer"
	RoleOperator = "operator"
	RoleAdmin    = "admin"
	RoleBuilder  = "builder"
)

// RoleRank orders the person roles; builder stands apart and ranks nothing.
func RoleRank(role string) int {
	switch role {
	case RoleViewer:
		return 1
	case RoleOperator:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// ValidRole reports whether r is a known role.
func ValidRole(r string) bool {
	return r == RoleViewer || r == RoleOperator || r == RoleAdmin || r == RoleBuilder
}

// Module kinds.
const (
	KindService    = "service"
	KindHost       = "host"
	KindController = "controller"
)

// Instance states.
const (
	InstanceStarting = "starting"
	InstanceServing  = "serving"
	InstanceDraining = "draining"
	InstanceStopped  = "stopped"
	// InstanceUnresponsive is observed, never stored: a live state whose
	// heartbeats stopped (a killed instance), since its last heartbeat.
	InstanceUnresponsive = "unresponsive"
)

// InstanceSilentAfter is how long an instance may miss heartbeats (every
// 15 s) before it is shown unresponsive.
const InstanceSilentAfter = time.Minute

// Observed is the instance as it can be said now: a live state whose
// heartbeats stopped more than InstanceSilentAfter ago is unresponsive
// (since HeartbeatAt) — a killed instance never shows serving.
func (i Instance) Observed(now time.Time) Instance {
	if i.State != InstanceStopped && now.Sub(i.HeartbeatAt) > InstanceSilentAfter {
		i.State = InstanceUnresponsive
	}
	return i
}

// Instance is one running controller process.
type Instance struct {
	ID          string    `gorm:"primaryKey" json:"id"`
	Version     string    `json:"version"`
	Build       int64     `json:"build"`
	State       string    `json:"state"`
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// StoreSchema is the newest store migration its build knows (0: a
	// build from before the column, which knows no batch envelopes).
	StoreSchema int64 `json:"-"`
	// Advertise is the names it was started to be reached under
	// (--advertise), a JSON list.
	Advertise string `json:"-"`
}

// SchemaBatchEnvelopes is the store migration that brought batch
// envelopes: an instance that knows fewer sends a declaration's stored
// single-signature envelope as it is.
const SchemaBatchEnvelopes = 21

// Key is one of the controller's ed25519 keys. Purpose "declaration" signs
// declarations and host releases; "token" signs JWTs. Kept in the store so
// every replica signs alike.
type Key struct {
	ID         string `gorm:"primaryKey"`
	Purpose    string
	PrivateKey []byte
	PublicKey  []byte
	CreatedAt  time.Time
}

// User is a person (or a builder) who may call the operator API.
type User struct {
	ID           int64     `gorm:"primaryKey" json:"id"`
	Name         string    `json:"name"`
	Role         string    `json:"role"`
	PasswordHash string    `json:"-"`
	CreatedAt    time.Time `json:"created_at"`
	// DisabledAt is set while the user is disabled: no login, and every
	// token they held before it was revoked (RevokedUser).
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
	DisabledBy string     `json:"disabled_by,omitempty"`
}

// JoinToken lets one host enrol once before it expires, unless an admin
// revokes it first. Only its hash is kept.
type JoinToken struct {
	ID        int64 `gorm:"primaryKey"`
	TokenHash string
	ExpiresAt time.Time
	UsedAt    *time.Time
	UsedBy    string
	RevokedAt *time.Time
	RevokedBy string
	CreatedBy string
	CreatedAt time.Time
	// Labels (JSON object) are given to the machine that enrols with it:
	// the only way a machine has labels before an operator sets them.
	Labels string
}

// Join token states, as listed.
const (
	JoinTokenUnused  = "unused"
	JoinTokenUsed    = "used"
	JoinTokenRevoked = "revoked"
	JoinTokenExpired = "expired"
)

// State says what a join token is at now: used and revoked are for good and
// come first; an unused one expires at ExpiresAt.
func (jt *JoinToken) State(now time.Time) string {
	switch {
	case jt.UsedAt != nil:
		return JoinTokenUsed
	case jt.RevokedAt != nil:
		return JoinTokenRevoked
	case !now.Before(jt.ExpiresAt):
		return JoinTokenExpired
	default:
		return JoinTokenUnused
	}
}

// Spendable says whether a host may enrol with the token at now.
func (jt *JoinToken) Spendable(now time.Time) bool { return jt.State(now) == JoinTokenUnused }

// Machine is a computer registered with the controller.
type Machine struct {
	ID          int64  `gorm:"primaryKey"`
	Name        string `gorm:"column:name"`
	OS          string `gorm:"column:os"`
	Arch        string `gorm:"column:arch"`
	HostVersion string `gorm:"column:host_version"`
	// LauncherVersion is the launcher running the host, as its last
	// report said ("" without one).
	LauncherVersion   string     `gorm:"column:launcher_version"`
	Schema            string     `gorm:"column:schema"`
	Generation        int64      `gorm:"column:generation"`
	GenerationTrigger string     `gorm:"column:generation_trigger"`
	GenerationAt      time.Time  `gorm:"column:generation_at"`
	EmptyOK           bool       `gorm:"column:empty_ok"`
	TargetHostVersion string     `gorm:"column:target_host_version"`
	AppliedGeneration int64      `gorm:"column:applied_generation"`
	FinishedGen       int64      `gorm:"column:finished_generation"`
	LastOutcome       string     `gorm:"column:last_outcome"`
	LastReason        string     `gorm:"column:last_reason"`
	LastReportAt      *time.Time `gorm:"column:last_report_at"`
	LastOutcomeAt     *time.Time `gorm:"column:last_outcome_at"`          // when LastOutcome was reported (LastReportAt moves with every report)
	LastOutcomeGen    int64      `gorm:"column:last_outcome_generation"`  // the generation LastOutcome is of
	LastOutcomeSend   string     `gorm:"column:last_outcome_send"`        // the send it was reported of ("": none, or before it was kept)
	Running           string     `gorm:"column:running"`                  // JSON: module → {build, digest}
	Health            string     `gorm:"column:health;default:none"`      // passing, failing, none
	HealthCheck       string     `gorm:"column:health_check"`             // the failing check
	HealthDetail      string     `gorm:"column:health_detail"`            // what it said
	HealthSince       *time.Time `gorm:"column:health_since"`             // failing (or passing) since
	HealthFailing     string     `gorm:"column:health_failing"`           // JSON: each failing check → since when ("" when none)
	HealthAt          *time.Time `gorm:"column:health_at"`                // when the host last checked
	ComposeError      string     `gorm:"column:compose_error"`            // why ComposeErrorGen could not be composed
	ComposeErrorGen   int64      `gorm:"column:compose_error_generation"` // 0: none recorded
	HeldBack          string     `gorm:"column:held_back"`                // why its generation carries held-back content ("" when it does not)
	Conflict          bool       `gorm:"column:conflict"`
	ConflictHostGen   int64      `gorm:"column:conflict_host_generation"`
	ConflictAt        *time.Time `gorm:"column:conflict_at"` // when the latest conflict was found (nil: found before it was kept)
	TokenID           string     `gorm:"column:token_id"`    // the enrolment's id: its host token's and certificates'
	LastSeen          *time.Time `gorm:"column:last_seen"`
	CreatedAt         time.Time  `gorm:"column:created_at"`
	CertSerial        string     `gorm:"column:cert_serial"`     // the client certificate last issued (hex); "": none
	CertNotAfter      *time.Time `gorm:"column:cert_not_after"`  // when it expires
	CertNotBefore     *time.Time `gorm:"column:cert_not_before"` // when it begins (nil: issued before it was kept)
	// CertInUse is the certificate its host presents (its first use
	// recorded, Store.CertInUse); "": none presented yet.
	CertInUse     string     `gorm:"column:cert_in_use"`
	RevokedAt     *time.Time `gorm:"column:revoked_at"` // its identity revoked: state revoked
	RevokedReason string     `gorm:"column:revoked_reason"`
	RevokedBy     string     `gorm:"column:revoked_by"` // who: a person, or "controller"
}

// MachineVariable is one key/value of a machine, used as ${var.KEY}.
type MachineVariable struct {
	MachineID int64  `gorm:"primaryKey"`
	Key       string `gorm:"primaryKey"`
	Value     string
}

// Module is a deployable unit.
type Module struct {
	ID           int64 `gorm:"primaryKey"`
	Name         string
	Kind         string
	Repository   string
	SourcePaths  string // JSON array
	Tiers        string // JSON array
	CurrentBuild *int64
	// CurrentReason is why a person made an older build current, and
	// CurrentBackFrom the newest build gone back from: machines that run
	// a build newer than the current one, up to that, move back to it
	// (GoneBack, ChooseBuild). Both cleared once a build no older than
	// the one before is made current.
	CurrentReason   string
	CurrentBackFrom int64
	// TierDeadlineSeconds is how long a plan's tier may take before it halts.
	TierDeadlineSeconds int64 `gorm:"default:600"`
	// OnFailure is what a failing tier does to its plan: OnFailureHalt, or
	// OnFailureRollback (service modules only).
	OnFailure string `gorm:"default:halt"`
	CreatedAt time.Time
	// Selector gives the module to every machine whose labels match it
	// (ParseSelector); empty: only where assigned.
	Selector string
}

// Build is an immutable build of a module. Number is monotonic per module.
type Build struct {
	ID        int64 `gorm:"primaryKey"`
	ModuleID  int64
	Number    int64
	Version   string
	Commit    string `gorm:"column:source_commit"`
	Digest    string
	Size      int64
	Manifest  string // JSON, see Manifest
	CreatedBy string
	CreatedAt time.Time
	// State is ready, or queued/building for a build queued from a merge.
	State      string `gorm:"default:ready"`
	MergeID    *int64
	LeaseOwner string
	LeaseUntil *time.Time
	// YankReason, YankedBy and YankedAt are set when the build is yanked.
	YankReason string
	YankedBy   string
	YankedAt   *time.Time
}

// Assignment puts a module on a machine, optionally pinned to a build.
type Assignment struct {
	MachineID int64 `gorm:"primaryKey"`
	ModuleID  int64 `gorm:"primaryKey"`
	Build     *int64
	Reason    string
	PinPlan   int64 // the plan whose rollback set this pin (a newer plan lifts it); 0: a person's
	CreatedAt time.Time
	// Assigned: a person assigned the module. Selected: the module's
	// selector matches the machine's labels. The row is there while
	// either holds; composing and plans read it alike.
	Assigned bool
	Selected bool
}

// Declaration is the one composed declaration of (machine, generation).
type Declaration struct {
	ID         int64 `gorm:"primaryKey"`
	MachineID  int64
	Generation int64
	Digest     string
	// Envelope is the single-signature envelope; empty until a host that
	// does not verify batch envelopes first needs it (SingleEnvelope).
	Envelope []byte
	// Batch is the batch envelope (models.BatchEnvelope), nil for rows
	// composed before batches.
	Batch      []byte
	Artifacts  string // the blob digests it names, space-separated
	Trigger    string
	ComposedBy string
	ComposedAt time.Time
	Schema     int    `gorm:"default:1"` // the declaration schema it was composed in
	HeldBack   string // why it carries held-back content ("" when it does not)
}

// Sealed is the envelope stored for the declaration that carries its
// payload: the single-signature one once signed, else the batch one.
func (d *Declaration) Sealed() []byte {
	if len(d.Envelope) > 0 {
		return d.Envelope
	}
	return d.Batch
}

// Send is one delivery of a declaration to a host, written before the bytes leave.
type Send struct {
	ID         string    `gorm:"primaryKey" json:"id"`
	MachineID  int64     `json:"-"`
	Machine    string    `gorm:"-" json:"machine"`
	Generation int64     `json:"generation"`
	Digest     string    `json:"digest"`
	InstanceID string    `json:"instance"`
	Trigger    string    `json:"trigger"`
	CreatedAt  time.Time `json:"time"`
	Schema     int       `gorm:"default:1" json:"schema"` // the declaration schema the bytes were in
}

// IsSendID says whether s has a send id's form: a UUID of 36 characters.
func IsSendID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// SendOf is the send row of c's declaration to its machine by instance,
// with a new time-ordered id: the one shape of a send row, whether a poll
// writes it through the send writer or composing writes it with the
// declaration.
func SendOf(c *Composed, instance string) Send {
	return Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: c.MachineID, Generation: c.Generation,
		Digest: c.Digest, InstanceID: instance, Trigger: c.Trigger, CreatedAt: time.Now().UTC(), Schema: c.Schema}
}

// ReportRow is a host's report as stored: its own row, never an overwrite.
type ReportRow struct {
	ID          int64 `gorm:"primaryKey"`
	SendID      string
	MachineID   int64
	Generation  int64
	Digest      string
	Outcome     string
	Reason      string
	Attempt     int
	HostVersion string
	StartedAt   *time.Time
	FinishedAt  *time.Time
	Body        string // the report's JSON as received, unknown fields kept
	CreatedAt   time.Time
}

// TableName keeps the table's plain name.
func (ReportRow) TableName() string { return "reports" }

// Blob is a content-addressed artifact as stored: its head, never its
// bytes, which the store keeps in chunks of ChunkSize (0: one chunk, a
// blob stored before chunks) and reads one chunk at a time. Kept in the
// store so that every replica serves the same bytes.
type Blob struct {
	Digest    string `gorm:"primaryKey"`
	Size      int64
	ChunkSize int64
	CreatedAt time.Time
	// TreeRefused says why every host would refuse to unpack the blob as
	// a tree ("": it unpacks), judged as it was uploaded; never stored.
	TreeRefused string `gorm:"-"`
}

// An audit row's bounds: a target (or actor) as long as the log's filter
// takes, and a detail of a few lines. Words that come from outside are
// cut to them, never refused: the event stays on the record.
const (
	MaxAuditTarget = 300
	MaxAuditDetail = 4 << 10
)

// AuditEvent records who did what, when.
type AuditEvent struct {
	ID     int64     `gorm:"primaryKey" json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Target string    `json:"target"`
	Detail string    `json:"detail"`
}

// AuditFilter picks audit events by exact target ("machine/m1",
// "module/web", "plan/12") and action ("revoke-machine"), and by actor
// ("user:alice" with her API tokens, "host:m1", "controller" with its
// instances, "anonymous"); an empty field matches any.
type AuditFilter struct {
	Target, Action, Actor string
}

// TokenLeeway is how far past its expiry a person's token is still
// accepted (clocks of replicas and clients differ). A revocation is kept
// that much longer than the token it refuses, or the token would be
// accepted again in that last stretch.
const TokenLeeway = 30 * time.Second

// Revocation is a token id refused until the token would have expired.
type Revocation struct {
	TokenID   string    `gorm:"primaryKey" json:"token_id"`
	Kind      string    `json:"kind"` // session, api-token, user, machine, certificate, bearer
	Reason    string    `json:"reason"`
	RevokedBy string    `json:"revoked_by"`
	RevokedAt time.Time `json:"revoked_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Kinds of revoked token.
const (
	RevokedSession = "session"
	// RevokedAPIToken is one API token, by its id.
	RevokedAPIToken = "api-token"
	// RevokedUser is every token of one user issued up to a time
	// (UserRevocationID): a disable, a role change or a new password.
	RevokedUser = "user"
	// RevokedMachine is an enrolment (a machine's id): its bearer token
	// and every certificate issued to it.
	RevokedMachine = "machine"
	// RevokedCertificate is one machine certificate, by serial: an
	// expired one spent on its one renewal in the grace.
	RevokedCertificate = "certificate"
	// RevokedBearer is an enrolment's bearer token alone
	// (BearerRevocationID): a machine enrolled with a certificate is named
	// by it only, so a copied host.json is not the machine.
	RevokedBearer = "bearer"
)

// BearerRevocationID is the revocation id of an enrolment's bearer token
// used without a certificate.
func BearerRevocationID(enrolment string) string { return "bearer:" + enrolment }

// CertRevocationID is the revocation id of a machine certificate's serial.
func CertRevocationID(serial string) string { return "cert:" + serial }

// CertRetiredID is the revocation id of a machine certificate replaced by
// a newer one its host has presented since.
func CertRetiredID(serial string) string { return "cert-retired:" + serial }
