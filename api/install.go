package api

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	_ "embed"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/labstack/echo/v4"

	"mesh/auth"
	"mesh/models"
)

// maxReleases bounds the releases /install.sh considers (newest first);
// a fleet publishes a handful per version.
const maxReleases = 1000

//go:embed install.sh.tmpl
var installTmplText string

// installTmpl is /install.sh. Every value it is given is single-quoted by
// sq, so a version or URL cannot become shell code.
var installTmpl = template.Must(template.New("install.sh").Funcs(template.FuncMap{"sq": shellQuote}).Parse(installTmplText))

// shellQuote quotes s for a POSIX shell: in single quotes, each ' as '\”.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

type installRelease struct {
	Platform, Version, Digest, KeyID, Signature string
}

type installKey struct {
	ID, PEM string
}

// installScript serves /install.sh (no token: it holds nothing secret).
// It carries the host releases a new machine starts with and the
// declaration keys their records are signed by, so the script checks the
// binary before it runs it, with nothing but curl, openssl and sha256sum.
func (s *Server) installScript(c echo.Context) error {
	def, rs, keys, err := s.installFacts.get(c.Request().Context(), s.Store)
	if err != nil {
		return err
	}
	data := struct {
		Controller, Unit, Published string
		Releases                    []installRelease
		Keys                        []installKey
	}{Controller: s.Enrolment.controllerURL(c.Request()), Unit: string(s.HostUnit)}
	var platforms []string
	for p, r := range models.InstallReleases(def, rs) {
		platforms = append(platforms, p)
		data.Releases = append(data.Releases, installRelease{Platform: p, Version: r.Version, Digest: r.Digest,
			KeyID: r.KeyID, Signature: base64.StdEncoding.EncodeToString(r.Signature)})
	}
	sort.Strings(platforms)
	sort.Slice(data.Releases, func(i, j int) bool { return data.Releases[i].Platform < data.Releases[j].Platform })
	data.Published = strings.Join(platforms, " ")
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(ed25519.PublicKey(k.PublicKey))
		if err != nil {
			return fmt.Errorf("declaration key %s: %w", k.ID, err)
		}
		data.Keys = append(data.Keys, installKey{ID: k.ID, PEM: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))})
	}
	var buf bytes.Buffer
	if err := installTmpl.Execute(&buf, data); err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, "text/plain; charset=utf-8", buf.Bytes())
}

// installBinary serves a host release's binary to /install.sh without a
// token: only the digest of a ready release, never another blob (a
// module's artifacts stay behind a host's or a person's token).
func (s *Server) installBinary(c echo.Context) error {
	d := c.Param("digest")
	if !models.ValidDigest(d) {
		return models.Invalid("digest", "sha256:<64 hex digits>")
	}
	// Judged from the facts the script is made of (a store read a second,
	// not one a request, whatever digest is named).
	def, rs, _, err := s.installFacts.get(c.Request().Context(), s.Store)
	if err != nil {
		return err
	}
	if !models.IsInstallable(d, rs) {
		return fmt.Errorf("%w: no ready host release has digest %s", models.ErrNotFound, d)
	}
	offered := map[string]bool{}
	for _, r := range models.InstallReleases(def, rs) {
		offered[r.Digest] = true
	}
	if !offered[d] {
		// A ready release the script does not offer (an older one, by
		// hand): from the store, a chunk held a download, so few at once.
		release, err := s.installOthers.take()
		if err != nil {
			s.installRefused(c, err)
			return err
		}
		defer release()
		return s.serveBlob(c, d)
	}
	// The binaries the script offers (one a platform) are served from one
	// copy in memory for every download: each download served from the
	// store held a chunk of its own (store.ChunkSize) for as long as its
	// client was slow, and 2,000 slow clients held 3 GB.
	shared, err := s.installBlobs.get(c.Request().Context(), d, s.Store, offered)
	if err != nil {
		return err
	}
	return s.serveBlobFrom(c, d, shared.blob, bytes.NewReader(shared.bytes))
}

// installOthers bounds the downloads at once of ready releases the script
// does not offer (each holds a chunk while its client reads).
type installOthers struct{ n atomic.Int64 }

const maxOtherDownloads = 8

func (o *installOthers) take() (func(), error) {
	if o.n.Add(1) > maxOtherDownloads {
		o.n.Add(-1)
		return nil, &models.RetryAfterError{After: 10 * time.Second, Err: fmt.Errorf(
			"%w: %d downloads at once of host releases the install script does not offer; try again in 10 s", models.ErrTooManyRequests, maxOtherDownloads)}
	}
	var once sync.Once
	return func() { once.Do(func() { o.n.Add(-1) }) }, nil
}

// installLimited refuses an address past its pace of install requests:
// anyone may ask, and each script is three store reads (a flood from one
// address slowed every host's declarations 25 times).
func (s *Server) installLimited(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.installLimit.take(c.RealIP()); err != nil {
			s.installRefused(c, err)
			return err
		}
		return next(c)
	}
}

// installRefused puts a refused install request on the record, a row a
// minute per address.
func (s *Server) installRefused(c echo.Context, err error) {
	_ = s.refusals.Record(c.Request().Context(), s.Store.Audit, c.RealIP()+"\x00install",
		auth.Row{Actor: "anonymous", Action: "install-refused", Target: "address/" + c.RealIP()}, err.Error())
}

// installFacts keeps what the install script is made of (the fleet's
// default, the releases, the declaration keys) for installFactsAge: each
// script was three store reads, and a flood of them from one address
// slowed every host's declarations 25 times. A release published or
// failed is in the script at most that much later.
type installFacts struct {
	mu     sync.Mutex
	readAt time.Time
	def    string
	rs     []models.Release
	keys   []models.Key
}

const installFactsAge = time.Second

// forget drops the facts kept: the next script reads the store.
func (f *installFacts) forget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readAt = time.Time{}
}

// installChanged: a release published here is in the next script at once
// (another instance's within installFactsAge).
func (s *Server) installChanged(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		s.installFacts.forget()
		return err
	}
}

// factStore is what the install script reads of the store.
type factStore interface {
	HostDefault(ctx context.Context) (string, error)
	Releases(ctx context.Context, limit int, cursor int64) ([]models.Release, error)
	Keys(ctx context.Context, purpose string) ([]models.Key, error)
}

// get reads the facts once for every script asked within installFactsAge
// (those asked meanwhile wait for the read in flight).
func (f *installFacts) get(ctx context.Context, st factStore) (string, []models.Release, []models.Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.readAt.IsZero() && time.Since(f.readAt) < installFactsAge {
		return f.def, f.rs, f.keys, nil
	}
	def, err := st.HostDefault(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	rs, err := st.Releases(ctx, maxReleases, 0)
	if err != nil {
		return "", nil, nil, err
	}
	keys, err := st.Keys(ctx, models.KeyDeclaration)
	if err != nil {
		return "", nil, nil, err
	}
	f.def, f.rs, f.keys, f.readAt = def, rs, keys, time.Now()
	return def, rs, keys, nil
}

// installBlobs keeps the host releases' binaries being installed, one
// copy each, so a download costs the controller no memory of its own.
type installBlobs struct {
	mu      sync.Mutex
	entries []*installBlob // the most recently asked for last
}

type installBlob struct {
	digest string
	ready  chan struct{}
	blob   *models.Blob
	bytes  []byte
	err    error
}

// blobOpener is the store's way to a blob.
type blobOpener interface {
	OpenBlob(ctx context.Context, digest string) (*models.Blob, io.ReadSeeker, error)
}

// get is the binary of digest, one the script offers, read once from the
// store by the first to ask (the rest wait for it). What is kept is the
// offered binaries only: one the script no longer offers is let go (a
// download still under way keeps its copy), so a few digests named in
// turn do not each make a copy of their own.
func (ib *installBlobs) get(ctx context.Context, digest string, st blobOpener, offered map[string]bool) (*installBlob, error) {
	ib.mu.Lock()
	ib.entries = slices.DeleteFunc(ib.entries, func(x *installBlob) bool { return !offered[x.digest] })
	var e *installBlob
	for _, x := range ib.entries {
		if x.digest == digest {
			e = x
			break
		}
	}
	load := e == nil
	if load {
		e = &installBlob{digest: digest, ready: make(chan struct{})}
		ib.entries = append(ib.entries, e)
	}
	ib.mu.Unlock()
	if load {
		// Not the asker's to cancel (the others wait on it), bounded all
		// the same.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		e.blob, e.bytes, e.err = readBlob(lctx, digest, st)
		cancel()
		close(e.ready)
		if e.err != nil {
			ib.forget(e)
		}
	}
	select {
	case <-e.ready:
		return e, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (ib *installBlobs) forget(e *installBlob) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ib.entries = slices.DeleteFunc(ib.entries, func(x *installBlob) bool { return x == e })
}

func readBlob(ctx context.Context, digest string, st blobOpener) (*models.Blob, []byte, error) {
	b, content, err := st.OpenBlob(ctx, digest)
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, b.Size)
	if _, err := io.ReadFull(content, buf); err != nil {
		return nil, nil, err
	}
	return b, buf, nil
}

// installLine is the one-liner a join token comes with: it carries the
// mesh CA itself, whose pin is the join pin, so curl trusts that CA alone
// (not a leaf that differs per replica and renewal) and the script checks
// CA and pin agree. Empty when the controller serves plain HTTP. curl
// tries again, as long as the controller's Retry-After says, when it is
// asked past an address's pace; the script is saved, then run, so a
// failed download fails the line (piped to sh, an empty script exited 0
// and provisioning took the machine for installed). Both files go in a
// directory of the line's own (mktemp -d): saved as names in the working
// directory, another local user's link planted there took the script
// root runs, or the CA curl trusts.
func (e Enrolment) installLine(url, token string) string {
	if !strings.HasPrefix(url, "https://") || len(e.CAPEM) == 0 || e.CAPin == "" {
		return ""
	}
	return `d=$(mktemp -d) && echo ` + base64.StdEncoding.EncodeToString(e.CAPEM) + ` | base64 -d > "$d/mesh-ca.pem" && curl -fsS --retry 10 --cacert "$d/mesh-ca.pem" -o "$d/install.sh" ` +
		shellQuote(url+"/install.sh") + ` && sh "$d/install.sh" --controller ` + shellQuote(url) + ` --ca-file "$d/mesh-ca.pem" --pin ` + e.CAPin +
		" --token " + token + ` --name "$(hostname)"`
}
