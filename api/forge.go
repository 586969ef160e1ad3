package api

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"mesh/auth"
	"mesh/models"
	"mesh/service"
)

// MaxHookBody caps a webhook's body (GitHub sends at most 25 MiB; pushes
// that large are refused, not truncated).
const MaxHookBody = 5 << 20

// HookBodies bounds the bytes of webhook bodies held at once (a dozen of
// the largest; a push's body is a few KiB), HookBodiesPerAddress those
// of one address, HookBodyWait how long a webhook's read waits for room
// before it is refused (429, audited), and HookBodyDeadline how long its
// body may take to arrive: a forge gives a whole delivery 10 s (GitHub;
// Gitea 5 s), so a sender that holds the bound longer is no forge, and
// one holding it must send it all again this often.
const (
	HookBodies           = 64 << 20
	HookBodiesPerAddress = 16 << 20
	HookBodyWait         = 5 * time.Second
	HookBodyDeadline     = 10 * time.Second
)

type sourceRequest struct {
	Name          string   `json:"name"`
	Kind          string   `json:"kind"`
	Repository    string   `json:"repository"`
	DefaultBranch string   `json:"default_branch"`
	Secret        string   `json:"secret"`
	AllowedFrom   []string `json:"allowed_from"`
}

func (s *Server) createSource(c echo.Context) error {
	var req sourceRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	if err := models.ValidName("name", req.Name); err != nil {
		return err
	}
	if req.Kind != models.ForgeGitea && req.Kind != models.ForgeForgejo && req.Kind != models.ForgeGitHub {
		return models.Invalid("kind", "gitea, forgejo or github")
	}
	if req.Repository == "" || req.DefaultBranch == "" {
		return models.Invalid("repository", "repository (owner/name) and default_branch are required")
	}
	if len(req.Secret) < 16 {
		return models.Invalid("secret", "at least 16 characters: the HMAC key the forge signs with")
	}
	from, err := models.ParseAllowedFrom("allowed_from", req.AllowedFrom)
	if err != nil {
		return err
	}
	src := &models.Source{Name: req.Name, Kind: req.Kind, Repository: req.Repository, DefaultBranch: req.DefaultBranch, Secret: req.Secret, AllowedFrom: from}
	if err := s.Store.CreateSource(c.Request().Context(), principal(c).Actor(), src); err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, src)
}

// updateSource changes where a source's webhooks may come from, keeping
// its record of deliveries and merges (deleting and making it again would
// lose them).
func (s *Server) updateSource(c echo.Context) error {
	var req struct {
		AllowedFrom *[]string `json:"allowed_from"`
	}
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	if req.AllowedFrom == nil {
		return models.Invalid("allowed_from", "required: the addresses and prefixes its webhooks may come from ([] for any)")
	}
	from, err := models.ParseAllowedFrom("allowed_from", *req.AllowedFrom)
	if err != nil {
		return err
	}
	src, err := s.Store.SetSourceAllowedFrom(c.Request().Context(), principal(c).Actor(), c.Param("source"), from)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, src)
}

func (s *Server) deleteSource(c echo.Context) error {
	if err := s.Service.DeleteSource(c.Request().Context(), principal(c).Actor(), c.Param("source")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) listSources(c echo.Context) error {
	ss, err := s.Store.Sources(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, List[models.Source]{Items: append([]models.Source{}, ss...)})
}

// hookHeaders are where each forge puts the event, the delivery id and
// the signature.
func hookHeaders(kind string, h http.Header) (event, delivery, sig string) {
	switch kind {
	case models.ForgeGitHub:
		return h.Get("X-GitHub-Event"), h.Get("X-GitHub-Delivery"), strings.TrimPrefix(h.Get("X-Hub-Signature-256"), "sha256=")
	case models.ForgeForgejo:
		// Forgejo sends its own headers and Gitea's; each is taken on its
		// own. Chosen together by the event's alone, a signed delivery
		// with no event was read for Gitea's signature, absent, and
		// refused as unsigned (401) rather than as incomplete (400).
		first := func(forgejo, gitea string) string {
			if v := h.Get(forgejo); v != "" {
				return v
			}
			return h.Get(gitea)
		}
		return first("X-Forgejo-Event", "X-Gitea-Event"), first("X-Forgejo-Delivery", "X-Gitea-Delivery"),
			first("X-Forgejo-Signature", "X-Gitea-Signature")
	}
	return h.Get("X-Gitea-Event"), h.Get("X-Gitea-Delivery"), h.Get("X-Gitea-Signature")
}

// pushPayload is the part of a push event mesh reads (GitHub's shape,
// which Gitea and Forgejo share).
type pushPayload struct {
	Ref        string `json:"ref"`
	Before     string `json:"before"`
	After      string `json:"after"`
	Deleted    bool   `json:"deleted"`
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Pusher struct {
		Name     string `json:"name"`
		Login    string `json:"login"`
		Username string `json:"username"`
	} `json:"pusher"`
	Commits pushCommits `json:"commits"`
	// Forced: the branch was forced (GitHub's word).
	Forced bool `json:"forced"`
	// TotalCommits is how many commits the push had (Gitea and Forgejo;
	// GitHub does not say): those forges list at most a few of them
	// (Gitea's FEED_MAX_COMMIT_NUM, 5 by default), so paths judged from
	// the list alone missed what the rest touched.
	TotalCommits *int `json:"total_commits"`
}

// githubListed is the most commits GitHub lists of a push: a list that
// long may have been cut, so the paths it names are not all the push
// touched.
const githubListed = 2048

// judgedWhole reports whether the commits listed are all the push had,
// so that its paths may be judged module by module.
func (p *pushPayload) judgedWhole() bool {
	switch {
	case p.Commits.more, p.Commits.listed >= githubListed:
		return false
	case p.TotalCommits != nil && *p.TotalCommits > p.Commits.listed:
		return false
	}
	return true
}

// maxPushPaths is the most distinct paths of a push kept: past it, as
// past maxPushCommits, the push is taken as touching every module (one
// commit naming 664,000 paths in a signed 5 MiB body was 179 MiB).
const maxPushPaths = 10_000

// maxPushCommits is the most commits of a push whose paths are read.
// GitHub lists at most 2,048; a push naming more (a signed body of
// millions of empty commits decoded whole was 400 MiB of heap) is taken
// as touching every module, as one naming no paths is.
const maxPushCommits = 4096

// pushCommits is the paths a push's commits name, each once, decoded a
// commit at a time into one value: a commit's list is not kept.
type pushCommits struct {
	paths []string
	// more: the push named more than maxPushCommits commits or
	// maxPushPaths paths; paths is not all they touch.
	more bool
	// listed is how many commits the list held.
	listed int
}

func (pc *pushCommits) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	if t, err := d.Token(); err != nil || t != json.Delim('[') {
		return fmt.Errorf("commits: not a list")
	}
	seen := map[string]bool{}
	// add keeps p once; false once the paths are past maxPushPaths.
	add := func(p string) bool {
		if seen[p] {
			return true
		}
		if len(pc.paths) == maxPushPaths {
			return false
		}
		seen[p] = true
		pc.paths = append(pc.paths, p)
		return true
	}
	for n := 0; d.More(); n++ {
		if n == maxPushCommits {
			pc.paths, pc.more = nil, true
			return nil
		}
		full, err := readCommit(d, add)
		if err != nil {
			return fmt.Errorf("commits[%d]: %w", n, err)
		}
		pc.listed = n + 1
		if full {
			pc.paths, pc.more = nil, true
			return nil
		}
	}
	return nil
}

// readCommit reads one commit of d a token at a time, giving add each path of
// its added, removed and modified lists (a commit's lists are not kept
// whole: one commit may name hundreds of thousands); full when add took
// no more.
func readCommit(d *json.Decoder, add func(string) bool) (full bool, err error) {
	t, err := d.Token()
	if err != nil || t == nil {
		return false, err // null: a commit of nothing
	}
	if t != json.Delim('{') {
		return false, fmt.Errorf("not an object")
	}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return false, err
		}
		if key, _ := k.(string); key != "added" && key != "removed" && key != "modified" {
			var skip json.RawMessage
			if err := d.Decode(&skip); err != nil {
				return false, err
			}
			continue
		}
		if t, err := d.Token(); err != nil {
			return false, err
		} else if t == nil {
			continue // null: no paths
		} else if t != json.Delim('[') {
			return false, fmt.Errorf("%s: not a list of paths", k)
		}
		for d.More() {
			t, err := d.Token()
			if err != nil {
				return false, err
			}
			p, ok := t.(string)
			if !ok {
				return false, fmt.Errorf("%s: a path is a string", k)
			}
			if !add(p) {
				return true, nil
			}
		}
		if _, err := d.Token(); err != nil { // ]
			return false, err
		}
	}
	_, err = d.Token() // }
	return false, err
}

// maxHookHeader is the most of a refused webhook's event and delivery
// headers its audit row keeps.
const maxHookHeader = 128

// hook takes a forge's webhook: HMAC-SHA256 over the raw body with the
// source's secret (constant-time comparison), deduplicated by delivery id.
func (s *Server) hook(c echo.Context) error {
	ctx := c.Request().Context()
	src, err := s.Store.Source(ctx, c.Param("source"))
	if err != nil {
		return err
	}
	if ip := c.RealIP(); !src.AllowedFrom.Allows(ip) {
		// Before a byte of the body is read: from elsewhere, nothing is
		// held, so an outsider cannot fill the bodies' bound. Once a
		// minute per source on the record, whatever the address (an
		// IPv6 /64 is addresses without end), counting the rest.
		_ = s.refusals.Record(ctx, s.Store.Audit, src.Name+"\x00hook-from", hookRefused(src.Name),
			fmt.Sprintf("from %s: not an address the source takes webhooks from", ip))
		return fmt.Errorf("%w: source %s does not take webhooks from %s (its allowed_from)", models.ErrForbidden, src.Name, ip)
	}
	br := s.hookBodies.reader(ctx, c.RealIP(), c.Request().Body)
	defer br.release()
	c.Request().Body = br
	body, err := readBody(c)
	var ra *models.RetryAfterError
	if errors.As(err, &ra) {
		// On the record: a forge does not send a delivery again by itself.
		_ = s.refusals.Record(ctx, s.Store.Audit, src.Name+"\x00hook-bodies", hookRefused(src.Name), fmt.Sprintf("from %s: %v", c.RealIP(), err))
	}
	if err != nil {
		return err
	}
	// A forge always signs, and a forge's addresses are shared (its other
	// users' webhooks come from them too): a good signature is always
	// taken, and only bad ones are limited, by source and address, so
	// someone else's misconfigured or hostile webhook on the same forge
	// does not lock out this source's deliveries.
	event, delivery, sig := hookHeaders(src.Kind, c.Request().Header)
	mac := hmac.New(sha256.New, []byte(src.Secret))
	mac.Write(body)
	want := mac.Sum(nil)
	got, decErr := hex.DecodeString(sig)
	if sig == "" || decErr != nil || !hmac.Equal(got, want) {
		key := c.RealIP() + " for source " + src.Name
		why := "signature wrong"
		if sig == "" {
			why = "no signature"
		}
		// The headers are the sender's, unchecked: a line of each (a
		// forge's event name and delivery id are short). Once a minute per
		// source and address, the next record counting the rest — those
		// the limit refuses too (counted before it: they went uncounted).
		_ = s.refusals.Record(ctx, s.Store.Audit, key+"\x00hook", hookRefused(src.Name), fmt.Sprintf("event %q delivery %q from %s: %s",
			models.EscapeLogLine(event, maxHookHeader), models.EscapeLogLine(delivery, maxHookHeader), c.RealIP(), why))
		if err := s.hookLimit.take(key); err != nil {
			return err
		}
		if sig == "" {
			return fmt.Errorf("%w: the webhook is not signed: set the source's secret in the forge's webhook", models.ErrUnauthorized)
		}
		return fmt.Errorf("%w: the webhook's signature does not match the source's secret", models.ErrUnauthorized)
	}
	// A signed delivery refused for what it says is on the record too: the
	// forge shows the refusal, but nothing here did.
	refuse := func(err error) error {
		_ = s.refusals.Record(ctx, s.Store.Audit, src.Name+"\x00hook-refused", hookRefused(src.Name), fmt.Sprintf("event %q delivery %q from %s: %v",
			models.EscapeLogLine(event, maxHookHeader), models.EscapeLogLine(delivery, maxHookHeader), c.RealIP(), err))
		return err
	}
	if event == "" || delivery == "" {
		return refuse(models.Invalid("headers", "the forge's event and delivery headers are required"))
	}
	if len(event) > maxHookHeader || len(delivery) > maxHookHeader {
		return refuse(models.Invalid("headers", fmt.Sprintf("the forge's event and delivery headers are at most %d bytes", maxHookHeader)))
	}
	if !hookWord(event) || !hookWord(delivery) {
		// Unsigned, and kept with the delivery: a forge's are words and
		// UUIDs. Bytes that are not UTF-8 were refused by PostgreSQL with
		// nothing on the record, and stored as sent by SQLite.
		return refuse(models.Invalid("headers", "the forge's event and delivery headers are printable ASCII"))
	}
	if bytes.HasPrefix(body, []byte("payload=")) {
		// GitHub's default content type: the JSON is the form's payload
		// field, and the signature (checked above) is over the form's
		// bytes. Its ping was answered and every push refused. Told by
		// the signed bytes, never the unsigned Content-Type: a signed JSON
		// push to a feature branch, posted again as a form, was read for
		// the "&payload=" a commit message carried (a push to main). A
		// JSON body starts with "{".
		form, err := url.ParseQuery(string(body))
		if err != nil || !form.Has("payload") {
			return refuse(models.Invalid("body", "a form-encoded webhook carries its JSON in a payload field"))
		}
		body = []byte(form.Get("payload"))
	}
	digest := sha256.Sum256(body)
	bodyKey := src.Name + "\x00" + string(digest[:])
	if first, ok := s.hookSeen.get(bodyKey); ok && first != delivery {
		// The same signed bytes under a new delivery id (the id is an
		// unsigned header): a captured delivery posted again. Its first
		// delivery was acted on; this one is a row a minute on the record.
		s.hookReplayed(ctx, src.Name, bodyKey, fmt.Sprintf("delivery %s from %s: the body of delivery %s again", delivery, c.RealIP(), first))
		return c.JSON(http.StatusOK, &models.DeliveryOutcome{Builds: []models.QueuedBuild{},
			Status: fmt.Sprintf("duplicate: the body of delivery %s, sent again as %s; not acted on again", first, delivery)})
	}
	var push *models.Push
	status := ""
	switch event {
	case "ping":
		status = "pong"
	case "push":
		var p pushPayload
		if err := json.Unmarshal(body, &p); err != nil {
			return refuse(models.Invalid("body", "not a push event: "+err.Error()))
		}
		if p.Forced {
			// A forced push lists the commits new to the branch, not
			// those it dropped: a module whose change was dropped kept
			// running it, judged by the listed paths alone. (GitHub says
			// so; Gitea and Forgejo do not.)
			p.Commits.paths = nil
		}
		// The words a status keeps of the push are cut to a line each:
		// they are kept with the delivery and shown wherever it is.
		word := func(s string) string { return models.EscapeLogLine(s, maxHookHeader) }
		switch {
		case p.Ref != "refs/heads/"+src.DefaultBranch:
			status = fmt.Sprintf("ignored: push to %s, not refs/heads/%s", word(p.Ref), src.DefaultBranch)
		case !strings.EqualFold(p.Repository.FullName, src.Repository):
			status = fmt.Sprintf("ignored: repository %s is not %s", word(p.Repository.FullName), src.Repository)
		case p.Deleted || strings.Trim(p.After, "0") == "":
			// A deleted branch names no commit to build (and no paths,
			// which would otherwise touch every module).
			status = fmt.Sprintf("ignored: %s was deleted", p.Ref)
		case !commitID.MatchString(p.After):
			return refuse(models.Invalid("after", fmt.Sprintf("%q is not a commit id (40 or 64 hex digits)", word(p.After))))
		default:
			push = &models.Push{Ref: p.Ref, Commit: p.After, Repository: src.Repository,
				Author: word(firstOf(p.Pusher.Name, p.Pusher.Login, p.Pusher.Username))}
			if commitID.MatchString(p.Before) && strings.Trim(p.Before, "0") != "" {
				push.Before = p.Before
			}
			// More commits than are read, or than the forge listed: every
			// module is touched.
			if p.judgedWhole() {
				push.Paths = p.Commits.paths
			}
		}
	default:
		status = "ignored: event " + event
	}
	out, err := s.Store.Deliver(ctx, src, delivery, event, push, status)
	if err != nil {
		return err
	}
	if out.Replay {
		s.hookReplayed(ctx, src.Name, src.Name+"\x00"+delivery, "delivery "+delivery+" from "+c.RealIP())
	} else {
		s.hookSeen.add(bodyKey, delivery)
	}
	return c.JSON(http.StatusOK, out)
}

// hookReplayed records a delivery received before, a row a minute per key.
func (s *Server) hookReplayed(ctx context.Context, src, key, detail string) {
	_ = s.refusals.Record(ctx, s.Store.Audit, key+"\x00hook-replay",
		auth.Row{Actor: "forge:" + src, Action: "webhook-replay", Target: "source/" + src}, detail)
}

// hookWord reports whether a forge's header is printable ASCII.
func hookWord(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '!' || s[i] > '~' {
			return false
		}
	}
	return true
}

// seenBodies remembers, per source, the delivery each signed body came
// with first, so that the body under another id is known for a replay.
// Bounded: past maxSeenBodies it starts over (a replay then writes one
// row more).
type seenBodies struct {
	mu sync.Mutex
	m  map[string]string
}

const maxSeenBodies = 10_000

func (b *seenBodies) get(key string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.m[key]
	return d, ok
}

func (b *seenBodies) add(key, delivery string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil || len(b.m) >= maxSeenBodies {
		b.m = map[string]string{}
	}
	if _, ok := b.m[key]; !ok {
		b.m[key] = delivery
	}
}

// hookRefused is the audit row of a refused webhook of source src.
func hookRefused(src string) auth.Row {
	return auth.Row{Actor: "forge:" + src, Action: "webhook-refused", Target: "source/" + src}
}

// commitID is a git commit id: SHA-1 or SHA-256, in hex.
var commitID = regexp.MustCompile(`^(?:[0-9a-f]{40}|[0-9a-f]{64})$`)

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// requireBuilder lets a builder's token, or an operator, through.
func (s *Server) requireBuilder(next echo.HandlerFunc) echo.HandlerFunc {
	return s.requirePerson(func(role string) error {
		if role != models.RoleBuilder && models.RoleRank(role) < models.RoleRank(models.RoleOperator) {
			return fmt.Errorf("%w: role %s may not build (needs builder or operator)", models.ErrForbidden, role)
		}
		return nil
	})(next)
}

// mayRelease says whether p may finish a mesh-host module's build, which
// becomes a host release: a builder (CI, set up by an admin for that
// module's forge) or an admin; not an operator, who may not make one.
func mayRelease(p *Principal) bool {
	return p != nil && (p.Role == models.RoleBuilder || p.Role == models.RoleAdmin)
}

// BuildLease is how long a builder holds a claimed build.
const BuildLease = 30 * time.Minute

func (s *Server) claimBuild(c echo.Context) error {
	b, err := s.Store.ClaimBuild(c.Request().Context(), principal(c).Actor(), BuildLease, mayRelease(principal(c)))
	if err != nil {
		return err
	}
	if b == nil {
		return c.NoContent(http.StatusNoContent)
	}
	return c.JSON(http.StatusOK, b)
}

// finishBuild takes a claimed build's artifact and manifest; the service
// stores it and starts what follows it.
func (s *Server) finishBuild(c echo.Context) error {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		return models.Invalid("id", "a build id")
	}
	mod, err := s.Store.BuildModule(c.Request().Context(), id)
	if err != nil {
		return err
	}
	if mod.Kind == models.KindHost && !mayRelease(principal(c)) {
		return fmt.Errorf("%w: build %d is of mesh-host module %s, and becomes a host release: a builder's or an admin's to finish", models.ErrForbidden, id, mod.Name)
	}
	up, err := s.readUpload(c, "artifact and manifest", "artifact", "manifest", "digest", "version", "os", "arch", "schemas")
	if err != nil {
		return err
	}
	f := up.fields
	res, err := s.Service.FinishBuild(c.Request().Context(), principal(c).Actor(), &service.FinishBuild{ID: id,
		Manifest: f["manifest"], Digest: f["digest"], Artifact: up.file,
		Version: f["version"], OS: f["os"], Arch: f["arch"], Schemas: f["schemas"]})
	if err != nil {
		return err
	}
	out := map[string]any{"build": buildView(res.Module.Name, res.Build), "plan": nil, "rollout": nil}
	if res.Plan != nil {
		out["plan"] = res.Plan
	}
	if res.Rollout != nil {
		out["rollout"] = res.Rollout
	}
	return c.JSON(http.StatusOK, out)
}
