// Package models holds mesh's domain: its records, the words of DESIGN.md,
// the rules that compose a declaration, and the errors every layer shares.
// It imports no sibling package.
package models

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Every layer wraps these with %w; api maps them to
// problem+json in one place.
var (
	ErrNotFound           = errors.New("not found")
	ErrConflict           = errors.New("conflict")
	ErrStaleGeneration    = errors.New("stale generation")
	ErrPreconditionNeeded = errors.New("If-Match with the current generation is required")
	ErrInvalid            = errors.New("invalid input")
	ErrUnauthorized       = errors.New("unauthorized")
	ErrForbidden          = errors.New("forbidden")
	ErrTokenUsed          = errors.New("join token is used, revoked, expired or unknown")
	ErrDigestMismatch     = errors.New("digest does not match the bytes")
	ErrDowngrade          = errors.New("would give an older build than the machine runs")
	ErrMachineConflict    = errors.New("machine is in conflict")
	ErrDraining           = errors.New("instance is draining")
	ErrStarting           = errors.New("instance is starting: not yet listening or loaded")
	ErrTooManyRequests    = errors.New("too many requests")
	ErrUnavailable        = errors.New("the store cannot be reached")
	ErrStorageFull        = errors.New("the store is out of disk space: nothing was stored")
)

// MachinesGoneError says a group of send rows was written but for the
// rows of machines removed meanwhile: those polls' hosts are answered as
// removed, the others as written.
type MachinesGoneError struct {
	Machines map[int64]bool
}

func (e *MachinesGoneError) Error() string {
	return fmt.Sprintf("%d machine(s) removed while their sends were recorded", len(e.Machines))
}

// RetryAfterError is a refusal that says when to try again (429, 503).
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }

// Unwrap makes errors.Is see the refusal's sentinel.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// NotComposableError says why a machine's generation cannot be composed:
// the request asking for its declaration was sound, the declared state is
// not (a 409, not a 400). It does not unwrap to the composing error,
// which is ErrInvalid when a variable or placeholder is wrong.
type NotComposableError struct {
	Generation int64
	Why        error
}

func (e *NotComposableError) Error() string {
	return fmt.Sprintf("generation %d cannot be composed: %v", e.Generation, e.Why)
}

// InvalidError names the field that is wrong and why; it is ErrInvalid.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Invalid builds an InvalidError.
func Invalid(field, reason string) error { return &InvalidError{Field: field, Reason: reason} }
