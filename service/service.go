// Package service holds the workflows a person, a builder or a forge sets
// going: upload a build, finish a claimed build, publish a host release,
// set variables, log in. Each workflow is one store write composed of
// transaction-level functions, with its input rules in Validate methods on
// its request type; api and web parse, call and render, and contain no
// rule, so the two cannot drift.
package service

import (
	"time"

	"mesh/auth"
	"mesh/models"
	"mesh/store"
)

// Signer signs release statements with the controller's declaration key.
type Signer interface {
	KeyID() string
	Sign(payload []byte) []byte
}

// Service holds the workflows' dependencies, filled in by cmd/.
type Service struct {
	Store  *store.Store
	Signer Signer
	Auth   *auth.Authority
	// Throttle slows password guessing (auth.NewThrottle).
	Throttle *auth.Throttle
	// ControllerBuild is this instance's build: a mesh-controller plan is
	// refused below what any controller runs.
	ControllerBuild int64
	// Certs issue machine certificates.
	Certs MachineCerts
	// refusals keeps the audit of repeated refusals sparse.
	refusals auth.Refusals
	// serviceCerts paces the service certificates signed (certPace).
	serviceCerts certPace
}

// DefaultRolloutDeadline is how long a machine has to report upgraded.
const DefaultRolloutDeadline = 10 * time.Minute

// signRelease fills a release's key id and signature over
// {version, os, arch, digest}.
func (s *Service) signRelease(r *models.Release) {
	r.KeyID = s.Signer.KeyID()
	r.Signature = s.Signer.Sign(models.ReleaseStatement(r.Version, r.OS, r.Arch, r.Digest))
}
