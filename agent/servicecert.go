package agent

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"mesh/meshca"
	"mesh/models"
)

// A certificate resource (schema 2): the key is made here and never leaves
// the machine; the controller sees only a CSR and signs it for the names
// the machine's declaration gives it. The chain (leaf, then the mesh CA)
// and the key are written atomically under --root, the key with the
// declared mode, and renewed two thirds into the lifetime.

// certificateDigest identifies what a certificate resource declares (not
// the certificate itself, which renewals change): a change of names, paths,
// mode, owner or lifetime issues a new one, and restarts the services
// declared after it (their digests include this one).
func certificateDigest(r models.Resource) string {
	b, _ := json.Marshal([]any{r.Names, r.Path, r.KeyPath, r.Mode, r.Owner, r.Lifetime})
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// certificateOnDisk reads the chain and key a certificate resource wrote
// and says when the certificate is to be renewed; an error when either is
// missing, unreadable, or they do not belong together.
func (a *Agent) certificateOnDisk(r models.Resource) (time.Time, error) {
	// The files themselves, never what a link planted in their place
	// names: read through links to another certificate's key and chain
	// (for the same names), "this" certificate was on disk and valid, and
	// the chown that followed gave the other's private key to this one's
	// owner. A link is written over by a new certificate.
	for _, p := range []string{r.Path, r.KeyPath} {
		fi, err := a.root.root.Lstat(rel(p))
		if err != nil {
			return time.Time{}, err
		}
		if !fi.Mode().IsRegular() {
			return time.Time{}, fmt.Errorf("%s is not a regular file (%s)", p, fi.Mode().Type())
		}
	}
	chain, err := a.root.root.ReadFile(rel(r.Path))
	if err != nil {
		return time.Time{}, err
	}
	key, err := a.root.root.ReadFile(rel(r.KeyPath))
	if err != nil {
		return time.Time{}, err
	}
	pair, err := tls.X509KeyPair(chain, key)
	if err != nil {
		return time.Time{}, fmt.Errorf("chain and key do not belong together: %w", err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return time.Time{}, err
		}
	}
	have := append([]string(nil), leaf.DNSNames...)
	if strings.Join(have, ",") != strings.Join(r.Names, ",") {
		return time.Time{}, fmt.Errorf("the certificate names %v, the declaration %v", have, r.Names)
	}
	lifetime, err := models.CertificateLifetime(r.Lifetime)
	if err != nil {
		return time.Time{}, err
	}
	return a.renewalAt(r.ID, leaf, lifetime), nil
}

// obtainedCert is a service certificate this process obtained: when, by
// the monotonic clock, and which (its NotAfter).
type obtainedCert struct {
	at       time.Time
	notAfter time.Time
}

// minRenewal is the least part of a lifetime between two renewals of a
// certificate this process obtained, whatever the clocks say.
const minRenewal = 10

// renewalAt is when a certificate is to be renewed. One this process
// obtained is judged by its own dates as issued, counted on the monotonic
// clock from when it was obtained: due once as long has passed as lies
// between its issue and its renewal point (two thirds of its lifetime,
// models.RenewAt), and never before a tenth of its lifetime has. The
// host's wall clock has no say in it: a clock ahead of the controller's by
// more than a third of the lifetime found every certificate due as it was
// issued, and renewed it (restarting its on_renew services) at every turn
// of the poll loop. Another (written before this process started) is
// judged by the wall clock against its renewal point.
func (a *Agent) renewalAt(id string, leaf *x509.Certificate, lifetime time.Duration) time.Time {
	wall := models.RenewAt(leaf.NotAfter, lifetime)
	o, ok := a.obtained[id]
	if !ok || !o.notAfter.Equal(leaf.NotAfter) {
		return wall
	}
	// Issued at its NotAfter less the lifetime by the controller's clock
	// (its NotBefore is set back a few minutes for peers' clocks behind);
	// never before its NotBefore.
	issued := leaf.NotAfter.Add(-lifetime)
	if issued.Before(leaf.NotBefore) {
		issued = leaf.NotBefore
	}
	return o.at.Add(max(wall.Sub(issued), lifetime/minRenewal))
}

// noteObtained records a certificate just obtained for resource id, and
// says once when the host's clock already finds it due: the clocks
// disagree by more than a third of its lifetime.
func (a *Agent) noteObtained(id string, leaf *x509.Certificate, lifetime time.Duration, at time.Time) {
	if a.obtained == nil {
		a.obtained = map[string]obtainedCert{}
	}
	a.obtained[id] = obtainedCert{at: at, notAfter: leaf.NotAfter}
	if wall := models.RenewAt(leaf.NotAfter, lifetime); !at.Before(wall) || at.Before(leaf.NotBefore) {
		a.once("clock:"+id, "the certificate of %s the controller just signed is valid from %s to %s, and this host's clock says %s: "+
			"the clocks disagree; it is renewed by how long it has been held, not by this host's clock",
			id, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339))
	}
}

// issueCertificate makes a key, has the controller sign a CSR for the
// resource's names (naming the send whose declaration gives them), and
// writes the key and then the chain. It returns the certificate's expiry.
func (a *Agent) issueCertificate(ctx context.Context, send string, r models.Resource) (time.Time, error) {
	lifetime, err := models.CertificateLifetime(r.Lifetime)
	if err != nil {
		return time.Time{}, err
	}
	key, err := meshca.NewKey()
	if err != nil {
		return time.Time{}, err
	}
	csr, err := meshca.NewServiceCSR(key, r.Names)
	if err != nil {
		return time.Time{}, err
	}
	chain, err := a.client.postCertificate(ctx, models.CertificateRequest{Send: send, Resource: r.ID, CSR: string(csr)})
	if err != nil {
		return time.Time{}, err
	}
	blk, _ := pem.Decode([]byte(chain))
	if blk == nil || blk.Type != "CERTIFICATE" {
		return time.Time{}, fmt.Errorf("the controller's answer holds no certificate")
	}
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return time.Time{}, err
	}
	if a.id.ca != nil {
		pool := x509.NewCertPool()
		pool.AddCert(a.id.ca)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: r.Names[0]}); err != nil {
			return time.Time{}, fmt.Errorf("the certificate signed for %s does not verify against the mesh CA: %w", r.ID, err)
		}
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return time.Time{}, err
	}
	// The key, then the chain, each written whole and renamed into place.
	// A chain that cannot be written (a full disk) puts the key before it
	// back: left beside the old chain, the new key made a pair that does
	// not load, where a valid certificate had been. (A host killed between
	// the two renames leaves that pair until its next apply writes both.)
	// Read only if it is the file itself: through a link planted there, the
	// key put back would be another certificate's, written as this one's.
	var oldKey []byte
	oldErr := errors.New("no key before it")
	if fi, err := a.root.root.Lstat(rel(r.KeyPath)); err == nil && fi.Mode().IsRegular() {
		oldKey, oldErr = a.root.root.ReadFile(rel(r.KeyPath))
	}
	if err := a.root.writeFile(r.KeyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), keyMode(r.Mode)); err != nil {
		return time.Time{}, err
	}
	if err := a.root.writeFile(r.Path, []byte(chain), 0o644); err != nil {
		if oldErr == nil {
			if kerr := a.root.writeFile(r.KeyPath, oldKey, keyMode(r.Mode)); kerr != nil {
				err = fmt.Errorf("%w; the key before it could not be put back either: %v", err, kerr)
			}
		}
		return time.Time{}, err
	}
	if err := a.chown(r); err != nil {
		return time.Time{}, err
	}
	a.noteObtained(r.ID, leaf, lifetime, time.Now())
	a.renewals.renewed(r.ID) // however it was issued, an apply's or a renewal's
	return leaf.NotAfter, nil
}

// certificateModes puts the declared modes (and owner) back on a
// certificate's key and chain that are otherwise as declared, and says
// what it put back ("" when nothing). A private key made readable by all
// (a person's chmod, a restore from a backup) read "unchanged" at every
// apply, where a file resource's drifted mode is written again.
func (a *Agent) certificateModes(r models.Resource) (string, error) {
	var restored []string
	for _, f := range []struct {
		p    string
		mode fs.FileMode
	}{{r.KeyPath, keyMode(r.Mode)}, {r.Path, 0o644}} {
		fi, err := a.root.root.Lstat(rel(f.p))
		if err != nil {
			return "", err
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("%s is not a regular file (%s)", f.p, fi.Mode().Type())
		}
		if have := fi.Mode().Perm(); have != f.mode {
			if err := a.root.root.Chmod(rel(f.p), f.mode); err != nil {
				return "", err
			}
			restored = append(restored, fmt.Sprintf("%s mode %04o (it was %04o)", f.p, f.mode, have))
		}
	}
	if err := a.chown(r); err != nil {
		return "", err
	}
	if len(restored) == 0 {
		return "", nil
	}
	return "restored " + strings.Join(restored, ", "), nil
}

func keyMode(m string) (mode fs.FileMode) {
	if m == "" {
		m = models.DefaultCertificateKeyMode
	}
	n, err := strconv.ParseUint(m, 8, 32)
	if err != nil {
		return 0o600
	}
	return fs.FileMode(n).Perm()
}

// chown gives the key and the chain to the declared owner (user or
// user:group), looked up on this machine.
func (a *Agent) chown(r models.Resource) error {
	if r.Owner == "" {
		return nil
	}
	un, gn, _ := strings.Cut(r.Owner, ":")
	u, err := user.Lookup(un)
	if err != nil {
		return fmt.Errorf("owner %s: %w", r.Owner, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if gn != "" {
		g, err := user.LookupGroup(gn)
		if err != nil {
			return fmt.Errorf("owner %s: %w", r.Owner, err)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	for _, p := range []string{r.KeyPath, r.Path} {
		// Lchown: a link planted meanwhile is given, not what it names.
		if err := a.root.root.Lchown(rel(p), uid, gid); err != nil {
			return fmt.Errorf("owner %s of %s: %w", r.Owner, p, err)
		}
	}
	return nil
}

// applyCertificate makes a certificate resource true: unchanged when the
// declared certificate is on disk and not due, else a new key and
// certificate. A certificate that was due when applied is a renewal too,
// so its on_renew services are told.
func (a *Agent) applyCertificate(ctx context.Context, send string, r models.Resource, prev *Managed) (models.Action, error) {
	digest := certificateDigest(r)
	verb := "created"
	if prev != nil {
		verb = "updated"
	}
	renewAt, err := a.certificateOnDisk(r)
	if prev != nil && prev.Digest == digest && err == nil && time.Now().Before(renewAt) {
		restored, err := a.certificateModes(r)
		if err != nil {
			return models.Action{}, err
		}
		if restored != "" {
			return models.Action{Resource: r.ID, Action: "updated", Digest: digest, Detail: restored}, nil
		}
		return models.Action{Resource: r.ID, Action: "unchanged", Digest: digest}, nil
	}
	notAfter, err := a.issueCertificate(ctx, send, r)
	if err != nil {
		return models.Action{}, err
	}
	detail := fmt.Sprintf("%s for %s until %s, key %s mode %04o", r.Path, strings.Join(r.Names, ", "),
		notAfter.UTC().Format(time.RFC3339), r.KeyPath, keyMode(r.Mode))
	if prev != nil && prev.Digest == digest {
		detail += "; renewed" + a.onRenew(ctx, r)
	}
	return models.Action{Resource: r.ID, Action: verb, Digest: digest, Detail: detail}, nil
}

// onRenew restarts or signals the services a renewed certificate names;
// it says what it did (or could not do) for the journal and the report.
func (a *Agent) onRenew(ctx context.Context, r models.Resource) string {
	var said []string
	for _, o := range r.OnRenew {
		if a.state.Resources[o.Service] == nil {
			said = append(said, o.Service+" not running yet")
			continue
		}
		what := "restarted " + o.Service
		if o.Signal != "" {
			what = "sent SIG" + o.Signal + " to " + o.Service
		}
		if err := a.services.Renewed(ctx, o.Service, o.Signal); err != nil {
			what += " failed: " + err.Error()
		}
		said = append(said, what)
	}
	if len(said) == 0 {
		return ""
	}
	return "; " + strings.Join(said, "; ")
}

// nextRenewal is when the soonest certificate the host manages is due (zero
// when it manages none).
func (a *Agent) nextRenewal() time.Time {
	var next time.Time
	for _, id := range sortedIDs(a.state.Resources) {
		m := a.state.Resources[id]
		if m.Kind != models.ResourceCertificate || m.Resource == nil {
			continue
		}
		at, err := a.certificateOnDisk(*m.Resource)
		if err != nil {
			at = time.Now() // gone or broken: put it back now
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// renewDue renews every certificate that is due, between applies: the key
// and chain are replaced, the named services restarted or signalled, and
// it is journaled and reported with outcome renewed, naming the applied
// send (it moves no generation). A renewal that fails is reported failed
// in words and tried again at the next poll.
func (a *Agent) renewDue(ctx context.Context) {
	for _, id := range sortedIDs(a.state.Resources) {
		m := a.state.Resources[id]
		if m.Kind != models.ResourceCertificate || m.Resource == nil {
			continue
		}
		r := *m.Resource
		if at, err := a.certificateOnDisk(r); err == nil && time.Now().Before(at) {
			continue
		}
		started := time.Now().UTC()
		send := cmp.Or(m.Send, a.state.AppliedSend) // the send that gave it as it is
		notAfter, err := a.issueCertificate(ctx, send, r)
		if err != nil {
			// Nothing was renewed: not a report saying "renewed" (one a
			// minute said so, the failure in its reason, and the machine
			// read healthy until the certificate expired), but a failing
			// check of the certificate until it is renewed.
			a.renewWait = min(max(2*a.renewWait, 2*time.Second), time.Minute)
			a.cfg.Log.Warn("certificate renewal failed", "resource", id, "err", err)
			a.renewals.failed(id, a.validUntil(r), err)
			a.lookSoon()
			continue
		}
		a.renewWait = 0
		a.renewals.renewed(id)
		a.lookSoon()
		act := models.Action{Resource: id, Action: "updated", Digest: m.Digest,
			Detail: fmt.Sprintf("renewed %s for %s until %s", r.Path, strings.Join(r.Names, ", "), notAfter.UTC().Format(time.RFC3339)) + a.onRenew(ctx, r)}
		a.cfg.Log.Info("certificate renewed", "resource", id, "until", notAfter)
		a.record(ctx, models.Report{Send: a.state.AppliedSend, Generation: a.state.Applied, Digest: a.state.AppliedDigest,
			Outcome: models.OutcomeRenewed, StartedAt: &started}, []models.Action{act}, nil)
	}
	a.renewals.keepOnly(func(id string) bool {
		m, ok := a.state.Resources[id]
		return ok && m.Kind == models.ResourceCertificate
	})
}

// validUntil is when the certificate on disk for r expires (zero when
// none can be read).
func (a *Agent) validUntil(r models.Resource) time.Time {
	if fi, err := a.root.root.Lstat(rel(r.Path)); err != nil || !fi.Mode().IsRegular() {
		return time.Time{}
	}
	chain, err := a.root.root.ReadFile(rel(r.Path))
	if err != nil {
		return time.Time{}
	}
	blk, _ := pem.Decode(chain)
	if blk == nil {
		return time.Time{}
	}
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return time.Time{}
	}
	return leaf.NotAfter
}

// renewalFailures are the certificates whose renewal between applies
// fails, each a failing check saying since when and why (the check loop
// reads them while the poll loop renews).
type renewalFailures struct {
	mu sync.Mutex
	by map[string]renewalFailure
}

type renewalFailure struct {
	since, until time.Time // the first failure; the expiry of the certificate in place
	tries        int
	why          string
}

func (f *renewalFailures) failed(id string, until time.Time, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by == nil {
		f.by = map[string]renewalFailure{}
	}
	rf, ok := f.by[id]
	if !ok {
		rf.since = time.Now().UTC()
	}
	rf.until, rf.why = until, err.Error()
	rf.tries++
	f.by[id] = rf
}

func (f *renewalFailures) renewed(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.by, id)
}

// keepOnly forgets the failures of certificates no longer declared.
func (f *renewalFailures) keepOnly(declared func(id string) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.by {
		if !declared(id) {
			delete(f.by, id)
		}
	}
}

// checks are the failing checks of the certificates whose renewal fails.
func (f *renewalFailures) checks() []models.CheckResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []models.CheckResult
	for _, id := range slices.Sorted(maps.Keys(f.by)) {
		rf := f.by[id]
		until := "cannot be read"
		if !rf.until.IsZero() {
			until = "valid until " + rf.until.Format(time.RFC3339)
		}
		out = append(out, models.CheckResult{Resource: id, At: time.Now().UTC(),
			Detail: fmt.Sprintf("its renewal fails (%d tries since %s): %s; the certificate in place is %s",
				rf.tries, rf.since.Format(time.RFC3339), models.EscapeLogLine(rf.why, 400), until)})
	}
	return out
}

// postCertificate asks the controller to sign a service's CSR; it returns
// the chain (PEM).
func (c *client) postCertificate(ctx context.Context, req models.CertificateRequest) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	hr, err := http.NewRequestWithContext(ctx, "POST", c.base()+"/api/v1/host/service-certificates", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	hr.Header.Set("Authorization", "Bearer "+c.id.Token)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(hr)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("certificate for %s: %s: %s", req.Resource, resp.Status, problemDetail(b))
	}
	var out struct {
		Chain string `json:"chain"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return "", fmt.Errorf("certificate for %s: %w", req.Resource, err)
	}
	return out.Chain, nil
}

// removeCertificate removes the chain and key a certificate resource wrote,
// except the paths its successor now (keep non-nil) uses.
func (a *Agent) removeCertificate(m *Managed, keep *models.Resource, claimed map[string]string) error {
	if m.Resource == nil {
		return nil
	}
	for _, p := range []string{m.Resource.Path, m.Resource.KeyPath} {
		if keep != nil && (p == keep.Path || p == keep.KeyPath) || claimed[p] != "" {
			continue
		}
		if err := a.root.remove(p); err != nil {
			return err
		}
	}
	return nil
}

// holdForRenewal shortens a poll's hold so the host wakes when a
// certificate is due (never below a second, and backed off while a
// renewal fails).
func (a *Agent) holdForRenewal(hold time.Duration) time.Duration {
	next := a.nextRenewal()
	if next.IsZero() {
		return hold
	}
	return min(hold, max(time.Until(next), time.Second, a.renewWait))
}
