package agent

import (
	"errors"
	"os"
	"path/filepath"

	"mesh/models"
)

// State is what the host has made true, written atomically after every
// apply (and every refusal): the generation it last finished, what it
// applied, and every resource it manages with its digest.
type State struct {
	// Finished is the last generation the host finished with: applied,
	// refused or rejected. It is the poll's If-None-Match.
	Finished int64 `json:"finished"`
	// Applied is the last generation applied, with its digest and send.
	Applied       int64  `json:"applied"`
	AppliedDigest string `json:"applied_digest"`
	AppliedSend   string `json:"applied_send"`
	// FinishedSend is the send that delivered Finished (empty when not
	// known: a state from before it was kept, or a name enrolled again);
	// polls name it (models.HeaderFinishedSend).
	FinishedSend string `json:"finished_send,omitempty"`
	// Resources by id: what apply-in-full compares the next declaration with.
	Resources map[string]*Managed `json:"resources"`
	// RefusedReleases are host release digests that were rolled back.
	RefusedReleases []string `json:"refused_releases,omitempty"`
	// Machine is the name the host was enrolled under when this state
	// began (empty in a state from before it was kept).
	Machine string `json:"machine,omitempty"`
	// Earlier is the last generation finished under each name the host
	// was enrolled under before Machine: enrolled again under one of
	// them, it takes that up again, so the earlier machine's declarations
	// stay older (m1, then web-7, then m1 again).
	Earlier map[string]int64 `json:"earlier,omitempty"`
	// HostRelease is the host release the applied generation
	// (HostReleaseGen) names, kept until this host runs it or has refused
	// it: an upgrade cut short — the host killed while it downloads or
	// stages, a restart, a power loss during the trial — is tried again on
	// the next poll that brings nothing new, where it was left to the
	// rollout's deadline (and a good release marked failed).
	HostRelease    *models.HostRelease `json:"host_release,omitempty"`
	HostReleaseGen int64               `json:"host_release_generation,omitempty"`
}

// Managed is one resource the host manages.
type Managed struct {
	Kind     string           `json:"kind"`
	Module   string           `json:"module"`
	Build    int64            `json:"build"`
	Path     string           `json:"path,omitempty"`
	Digest   string           `json:"digest"`
	OnRemove string           `json:"on_remove,omitempty"`
	Resource *models.Resource `json:"resource,omitempty"` // services: how to run it on adoption
	// Send is the send whose declaration gave a certificate as it is: its
	// renewal names it. The applied send did not always give it: a
	// generation that re-issued the certificate for new names and was then
	// rejected keeps it, its renewal asked for names the applied send's
	// declaration does not give, and was refused until it expired.
	Send  string            `json:"send,omitempty"`
	Extra map[string]string `json:"extra,omitempty"`
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// LoadState reads state.json; a missing one is the empty state.
func LoadState(dir string) (*State, error) {
	s := &State{Resources: map[string]*Managed{}}
	err := readJSON(statePath(dir), s)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if s.Resources == nil {
		s.Resources = map[string]*Managed{}
	}
	return s, err
}

// enrolled readies dir's state for the machine just enrolled as name.
// Under the same name the generations are kept: the store starts a name
// enrolled again past its earlier machine's last generation, and keeping
// what was finished keeps every declaration of the earlier machine older
// than what may be applied. Under another name they are forgotten: they
// were another machine's (its declarations, for another name, are refused
// whatever their generation), and the new machine's start at 1. A send
// was always the earlier machine's. What the host manages is kept, so the
// first declaration applies in full against it. A name the host had before
// the last takes up the generation it finished then (Earlier).
func enrolled(dir, name string) error {
	s, err := LoadState(dir)
	if err != nil {
		return err
	}
	if s.Machine != "" && s.Machine != name {
		if s.Earlier == nil {
			s.Earlier = map[string]int64{}
		}
		s.Earlier[s.Machine] = max(s.Earlier[s.Machine], s.Finished)
		s.Finished, s.Applied, s.AppliedDigest = s.Earlier[name], 0, ""
		delete(s.Earlier, name)
	}
	s.AppliedSend, s.FinishedSend, s.Machine = "", "", name
	return s.Save(dir)
}

// Save writes state.json atomically.
func (s *State) Save(dir string) error { return writeJSONAtomic(statePath(dir), s, 0o600) }

// Running is what the host runs, by module, for reports.
func (s *State) Running() map[string]models.RunningBuild {
	r := map[string]models.RunningBuild{}
	for _, m := range s.Resources {
		if m.Module == "" {
			continue
		}
		if cur, ok := r[m.Module]; !ok || m.Build > cur.Build {
			r[m.Module] = models.RunningBuild{Build: m.Build}
		}
	}
	return r
}

func (s *State) clone() *State {
	c := *s
	c.Resources = make(map[string]*Managed, len(s.Resources))
	for k, v := range s.Resources {
		vv := *v
		c.Resources[k] = &vv
	}
	return &c
}
