package api

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	_ "embed"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
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
	ctx := c.Request().Context()
	def, err := s.Store.HostDefault(ctx)
	if err != nil {
		return err
	}
	rs, err := s.Store.Releases(ctx, maxReleases, 0)
	if err != nil {
		return err
	}
	keys, err := s.Store.Keys(ctx, models.KeyDeclaration)
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
	rs, err := s.Store.Releases(c.Request().Context(), maxReleases, 0)
	if err != nil {
		return err
	}
	if !models.IsInstallable(d, rs) {
		return fmt.Errorf("%w: no ready host release has digest %s", models.ErrNotFound, d)
	}
	// Each download holds a chunk (store.ChunkSize) for as long as its
	// client is slow: without a bound, 2,000 slow clients held 3 GB.
	release, err := s.installing.take(c.RealIP())
	if err != nil {
		s.installRefused(c, err)
		return err
	}
	defer release()
	return s.serveBlob(c, d)
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

// MaxInstallDownloads and MaxInstallDownloadsPerAddress bound the
// anonymous downloads of host releases at once, each holding a chunk.
const (
	MaxInstallDownloads           = 64
	MaxInstallDownloadsPerAddress = 4
)

// downloads counts downloads in progress, in all and by address.
type downloads struct {
	mu          sync.Mutex
	max, perMax int
	n           int
	byAddr      map[string]int
}

func newDownloads(max, perAddr int) *downloads {
	return &downloads{max: max, perMax: perAddr, byAddr: map[string]int{}}
}

// take counts a download from addr, or refuses it (503: the machines
// installing come back shortly).
func (d *downloads) take(addr string) (func(), error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n >= d.max || d.byAddr[addr] >= d.perMax {
		return nil, &models.RetryAfterError{After: 10 * time.Second, Err: fmt.Errorf("%w: %d downloads of host releases at once (%d from %s); try again in 10 s",
			models.ErrUnavailable, d.n, d.byAddr[addr], addr)}
	}
	d.n++
	d.byAddr[addr]++
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.n--
			if d.byAddr[addr]--; d.byAddr[addr] <= 0 {
				delete(d.byAddr, addr)
			}
		})
	}, nil
}

// installLine is the one-liner a join token comes with: it carries the
// mesh CA itself, whose pin is the join pin, so curl trusts that CA alone
// (not a leaf that differs per replica and renewal) and the script checks
// CA and pin agree. Empty when the controller serves plain HTTP. curl
// tries again, as long as the controller's Retry-After says, when it is
// asked past an address's pace (machines installing behind one address).
func (e Enrolment) installLine(url, token string) string {
	if !strings.HasPrefix(url, "https://") || len(e.CAPEM) == 0 || e.CAPin == "" {
		return ""
	}
	return "echo " + base64.StdEncoding.EncodeToString(e.CAPEM) + " | base64 -d > mesh-ca.pem && curl -fsS --retry 10 --cacert mesh-ca.pem " +
		shellQuote(url+"/install.sh") + " | sh -s -- --controller " + shellQuote(url) + " --ca-file mesh-ca.pem --pin " + e.CAPin +
		" --token " + token + ` --name "$(hostname)"`
}
