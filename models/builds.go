package models

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Follow is what a build that has just become ready sets going.
type Follow int

// What follows a build.
const (
	// FollowNothing: the module's first build became current by itself.
	FollowNothing Follow = iota
	// FollowPlan: a later build of a service or controller module is
	// rolled out by a plan.
	FollowPlan
	// FollowRelease: a mesh-host build becomes a host release and enters
	// a host rollout instead of a plan.
	FollowRelease
)

// AfterBuild is the one rule for what follows a ready build, whether a
// person uploaded it or a builder finished it. currentBefore is the
// module's current build before this one was stored.
func AfterBuild(kind string, currentBefore *int64) Follow {
	switch {
	case kind == KindHost:
		return FollowRelease
	case currentBefore != nil:
		return FollowPlan
	}
	return FollowNothing
}

// Length limits of the words a build or release carries, the same on
// every route that takes them.
const (
	MaxVersionLen  = 100 // characters
	MaxCommitLen   = 200 // characters
	MaxVariableLen = 4096
)

var platformRE = regexp.MustCompile(`^[a-z0-9]{1,16}$`)

// ValidVersion reports why v is not a version a build or release may
// carry; required says whether it may be empty.
func ValidVersion(field, v string, required bool) error {
	switch {
	case v == "" && required:
		return Invalid(field, "required")
	case !utf8.ValidString(v) || utf8.RuneCountInString(v) > MaxVersionLen || strings.ContainsFunc(v, hidden):
		// A host release's version is what its hosts then say they run
		// (a report, a poll's X-Mesh-Host-Version, an enrolment), checked
		// by this same rule: one that uploads can run.
		return Invalid(field, fmt.Sprintf("at most %d characters, none of them a control or bidirectional formatting character", MaxVersionLen))
	}
	return nil
}

// ValidCommit reports why c is not a commit a build may name.
func ValidCommit(field, c string) error {
	if !utf8.ValidString(c) || utf8.RuneCountInString(c) > MaxCommitLen {
		return Invalid(field, "at most 200 characters")
	}
	return nil
}

// ValidPlatform reports why os/arch is not a platform a host release is
// built for ("linux", "amd64").
func ValidPlatform(goos, arch string) error {
	if !platformRE.MatchString(goos) || !platformRE.MatchString(arch) {
		return Invalid("os", "os and arch are required, like linux and amd64")
	}
	return nil
}

// ValidVariables reports why a machine's variables cannot be stored. The
// API and the dashboard both refuse through it, in the same words.
func ValidVariables(vars map[string]string) error {
	for k, v := range vars {
		if err := ValidVarKey(k); err != nil {
			return err
		}
		if len(v) > MaxVariableLen {
			return Invalid("variables."+k, "at most 4096 bytes")
		}
		// A value is substituted into paths, commands and files' text: a
		// NUL is never right there, and PostgreSQL could not store it
		// where SQLite would (the two stores answer alike).
		if strings.IndexByte(v, 0) >= 0 {
			return Invalid("variables."+k, "may not contain a NUL character (\\u0000)")
		}
	}
	return nil
}
