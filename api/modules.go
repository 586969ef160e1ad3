package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"mesh/models"
	"mesh/service"
)

type moduleRequest struct {
	Name         string        `json:"name"`
	Kind         string        `json:"kind"`
	Repository   string        `json:"repository"`
	SourcePaths  []string      `json:"source_paths"`
	Tiers        []models.Tier `json:"tiers"`
	TierDeadline string        `json:"tier_deadline"`
	OnFailure    string        `json:"on_failure"`
}

// ModuleView is a module as the API shows it.
type ModuleView struct {
	Name         string        `json:"name"`
	Kind         string        `json:"kind"`
	Repository   string        `json:"repository"`
	SourcePaths  []string      `json:"source_paths"`
	Tiers        []models.Tier `json:"tiers"`
	TierDeadline string        `json:"tier_deadline"`
	OnFailure    string        `json:"on_failure"`
	CurrentBuild *int64        `json:"current_build"`
	// CurrentReason: why a person made an older build current (going back).
	CurrentReason string    `json:"current_reason,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	// Selector gives the module to every machine whose labels match it.
	Selector string `json:"selector"`
}

func moduleView(m *models.Module) (ModuleView, error) {
	v := ModuleView{Name: m.Name, Kind: m.Kind, Repository: m.Repository, CurrentBuild: m.CurrentBuild, CurrentReason: m.CurrentReason,
		CreatedAt: m.CreatedAt, Selector: m.Selector,
		TierDeadline: (time.Duration(m.TierDeadlineSeconds) * time.Second).String(), OnFailure: m.OnFailure}
	var err error
	if v.SourcePaths, err = m.SourcePathList(); err != nil {
		return v, err
	}
	v.Tiers, err = m.TierList()
	return v, err
}

func (s *Server) createModule(c echo.Context) error {
	var req moduleRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	if req.Kind == models.KindHost {
		if err := hostReleasesByAdmin(c); err != nil {
			return err
		}
	}
	m, err := s.Service.CreateModule(c.Request().Context(), principal(c).Actor(), &service.CreateModule{Name: req.Name, Kind: req.Kind,
		Repository: req.Repository, SourcePaths: req.SourcePaths, Tiers: req.Tiers, TierDeadline: req.TierDeadline, OnFailure: req.OnFailure})
	if err != nil {
		return err
	}
	v, err := moduleView(m)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, v)
}

func (s *Server) getModule(c echo.Context) error {
	m, err := s.Store.Module(c.Request().Context(), c.Param("module"))
	if err != nil {
		return err
	}
	c.Response().Header().Set("ETag", m.ETag())
	v, err := moduleView(m)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

func (s *Server) listModules(c echo.Context) error {
	limit, cur, err := pageID(c)
	if err != nil {
		return err
	}
	ms, err := s.Store.Modules(c.Request().Context(), limit, cur)
	if err != nil {
		return err
	}
	views := make([]ModuleView, len(ms))
	for i := range ms {
		if views[i], err = moduleView(&ms[i]); err != nil {
			return err
		}
	}
	return c.JSON(http.StatusOK, listOf(views, limit, func(ModuleView) string { return strconv.FormatInt(ms[len(ms)-1].ID, 10) }))
}

// BuildView is a build as the API shows it.
type BuildView struct {
	Module    string          `json:"module"`
	Number    int64           `json:"number"`
	Version   string          `json:"version"`
	Commit    string          `json:"commit"`
	Digest    string          `json:"digest"`
	Size      int64           `json:"size"`
	Manifest  json.RawMessage `json:"manifest"`
	CreatedBy string          `json:"created_by"`
	CreatedAt time.Time       `json:"created_at"`
	State     string          `json:"state"`
	// YankReason, YankedBy and YankedAt: a yanked build's.
	YankReason string     `json:"yank_reason,omitempty"`
	YankedBy   string     `json:"yanked_by,omitempty"`
	YankedAt   *time.Time `json:"yanked_at,omitempty"`
}

func buildView(module string, b *models.Build) BuildView {
	state := b.State
	if state == "" {
		state = models.BuildReady
	}
	return BuildView{Module: module, Number: b.Number, Version: b.Version, Commit: b.Commit, Digest: b.Digest,
		Size: b.Size, Manifest: json.RawMessage(b.Manifest), CreatedBy: b.CreatedBy, CreatedAt: b.CreatedAt, State: state,
		YankReason: b.YankReason, YankedBy: b.YankedBy, YankedAt: b.YankedAt}
}

type yankRequest struct {
	Reason string `json:"reason"`
}

func (s *Server) yankBuild(c echo.Context) error {
	n, err := strconv.ParseInt(c.Param("number"), 10, 64)
	if err != nil {
		return models.Invalid("number", "a build number")
	}
	var req yankRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	b, err := s.Service.YankBuild(c.Request().Context(), principal(c).Actor(),
		service.YankBuild{Module: c.Param("module"), Number: n, Reason: req.Reason})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, buildView(c.Param("module"), b))
}

// createBuild takes a multipart upload: artifact (tar.gz, optional),
// manifest (JSON), version, commit, digest (optional; refused when the
// bytes do not match it), and for a mesh-host module os, arch and the
// schemas its binary decodes. What
// follows the build (a plan, a host release) is the service's rule.
func (s *Server) createBuild(c echo.Context) error {
	module := c.Param("module")
	if err := s.hostModuleByAdmin(c, module); err != nil {
		return err
	}
	up, err := s.readUpload(c, "manifest, version, commit and artifact", "artifact", "manifest", "version", "commit", "digest", "os", "arch", "schemas")
	if err != nil {
		return err
	}
	f := up.fields
	res, err := s.Service.UploadBuild(c.Request().Context(), principal(c).Actor(), &service.UploadBuild{Module: module,
		Version: f["version"], Commit: f["commit"], Manifest: f["manifest"], Digest: f["digest"], Artifact: up.file,
		OS: f["os"], Arch: f["arch"], Schemas: f["schemas"]})
	if err != nil {
		return err
	}
	if res.Same {
		// A retry of an upload whose answer was lost: the build it made.
		return c.JSON(http.StatusOK, buildView(module, res.Build))
	}
	return c.JSON(http.StatusCreated, buildView(module, res.Build))
}

func (s *Server) listBuilds(c echo.Context) error {
	limit, cur, err := pageID(c)
	if err != nil {
		return err
	}
	bs, mod, err := s.Store.Builds(c.Request().Context(), c.Param("module"), limit, cur)
	if err != nil {
		return err
	}
	views := make([]BuildView, len(bs))
	for i := range bs {
		views[i] = buildView(mod.Name, &bs[i])
	}
	return c.JSON(http.StatusOK, listOf(views, limit, func(v BuildView) string { return strconv.FormatInt(v.Number, 10) }))
}

func (s *Server) getBuild(c echo.Context) error {
	n, err := strconv.ParseInt(c.Param("number"), 10, 64)
	if err != nil {
		return models.Invalid("number", "a build number")
	}
	b, err := s.Store.Build(c.Request().Context(), c.Param("module"), n)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, buildView(c.Param("module"), b))
}

type currentRequest struct {
	Build int64 `json:"build"`
	// Reason: required to make a build older than the current one current.
	Reason string `json:"reason"`
}

func (s *Server) setCurrent(c echo.Context) error {
	var req currentRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	if req.Build <= 0 {
		return models.Invalid("build", "a build number")
	}
	n, err := s.Store.SetCurrent(c.Request().Context(), principal(c).Actor(), c.Param("module"), req.Build, req.Reason)
	if err != nil {
		return err
	}
	m, err := s.Store.Module(c.Request().Context(), c.Param("module"))
	if err != nil {
		return err
	}
	v, err := moduleView(m)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"module": v, "machines": n})
}

// maxUploadParts bounds the parts of an upload: a few fields and a file.
const maxUploadParts = 16

// upload is a multipart upload read part by part, as it arrives: its text
// fields (a file part of another name is read as text too: curl -F
// manifest=@m.json), and its one file, streamed into the store.
type upload struct {
	fields map[string]string
	file   *models.Blob
}

// readUpload reads a multipart body without holding its file: the part
// named file is streamed through the service into the store a chunk at a
// time, wherever it comes among the parts. (Echo's MultipartForm would
// first copy it whole, to memory up to its limit and then to a temp
// file.) A name other than file and fields is refused; expect says what
// the body should have been. The request's limit (bodyLimit) bounds it.
func (s *Server) readUpload(c echo.Context, expect, file string, fields ...string) (*upload, error) {
	bad := func(err error) error {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return err
		}
		return models.Invalid("body", "a multipart/form-data upload with "+expect+" is expected: "+err.Error())
	}
	mr, err := c.Request().MultipartReader()
	if err != nil {
		return nil, bad(err)
	}
	up := &upload{fields: map[string]string{}}
	for i := 0; ; i++ {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return up, nil
		}
		if err != nil {
			return nil, bad(err)
		}
		name := p.FormName()
		switch {
		case i >= maxUploadParts:
			return nil, models.Invalid(name, fmt.Sprintf("more than %d parts", maxUploadParts))
		case name == file && up.file != nil:
			return nil, models.Invalid(name, "given twice")
		case name == file:
			body := &bodyReader{r: p}
			if up.file, err = s.Service.PutArtifact(c.Request().Context(), body); err != nil {
				if body.err != nil {
					return nil, bad(body.err)
				}
				return nil, err
			}
		case slices.Contains(fields, name):
			b, err := io.ReadAll(io.LimitReader(p, MaxJSONBody+1))
			if err != nil {
				return nil, bad(err)
			}
			if len(b) > MaxJSONBody {
				return nil, models.Invalid(name, fmt.Sprintf("longer than %d bytes", MaxJSONBody))
			}
			// Text as a JSON body's is: what is stored is what was sent,
			// and the same on either store.
			if !utf8.Valid(b) {
				return nil, models.Invalid(name, "not valid UTF-8")
			}
			if bytes.IndexByte(b, 0) >= 0 {
				return nil, models.Invalid(name, "may not contain a NUL character")
			}
			if _, seen := up.fields[name]; !seen { // the first, as MultipartForm's callers took
				up.fields[name] = string(b)
			}
		default:
			return nil, models.Invalid(name, "unknown field")
		}
		p.Close()
	}
}

// bodyReader remembers its reader's failure, so that a failed upload is
// told apart: the request's body (the client's fault, or over its limit)
// or the store.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// hostReleasesByAdmin refuses a person below admin a mesh-host module's
// builds: each becomes a host release, signed and rolled out to the fleet
// (and offered by install.sh), which only an admin may start
// (POST /host-releases). A builder still fills the queued builds of a
// host module an admin set up (its forge, its source paths).
func hostReleasesByAdmin(c echo.Context) error {
	if p := principal(c); p == nil || models.RoleRank(p.Role) < models.RoleRank(models.RoleAdmin) {
		return fmt.Errorf("%w: a mesh-host module's builds become host releases, which only an admin may make", models.ErrForbidden)
	}
	return nil
}

// hostModuleByAdmin is hostReleasesByAdmin for a change to the module
// named (its builds, where they come from), when it is a mesh-host one;
// a module that cannot be read is refused, not let through.
func (s *Server) hostModuleByAdmin(c echo.Context, module string) error {
	mod, err := s.Store.Module(c.Request().Context(), module)
	if err != nil {
		return err
	}
	if mod.Kind != models.KindHost {
		return nil
	}
	return hostReleasesByAdmin(c)
}
