package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"mesh/client"
)

func (a *app) releasesCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "releases", Aliases: []string{"release"}, Short: "Host releases: mesh-host binaries and their rollouts (admin)"}
	var goos, goarch, schemas string
	upload := &cobra.Command{
		Use:   "upload VERSION BINARY --os OS --arch ARCH --schemas 1,2",
		Short: "Upload a mesh-host binary for an os/arch; the controller signs it",
		Long: `Upload a mesh-host binary for an os/arch; the controller signs it.
--schemas is the declaration schemas the binary decodes (what its polls
advertise in X-Mesh-Schema); there is no default: a machine is only sent
a schema its host decodes, and a trial whose poll advertises other
schemas fails.`,
		Example: `  meshctl releases upload 1.5.0 ./bin/mesh-host --os linux --arch amd64 --schemas 1,2`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.uploadRelease(cmd.Context(), args[0], args[1], goos, goarch, schemas)
		},
	}
	upload.Flags().StringVar(&goos, "os", "", "the binary's os (linux)")
	upload.Flags().StringVar(&goarch, "arch", "", "the binary's arch (amd64, arm64)")
	upload.Flags().StringVar(&schemas, "schemas", "", "the declaration schemas the binary decodes (1,2)")
	_ = upload.MarkFlagRequired("os")
	_ = upload.MarkFlagRequired("arch")
	_ = upload.MarkFlagRequired("schemas")

	var canary, deadline string
	var inFlight int
	rollout := &cobra.Command{
		Use:   "rollout VERSION [--canary 1|10%] [--max-in-flight N] [--deadline 10m]",
		Short: "Roll a release out: canaries first, then waves",
		Long: `Roll a release out to every machine of its platforms: the canaries first,
then waves of --max-in-flight. A machine that does not report 'upgraded'
within --deadline fails the rollout. The fleet default changes when it
completes. Follow it with 'meshctl releases watch VERSION'.`,
		Example: `  meshctl releases rollout 1.5.0 --canary 10% --max-in-flight 5 && meshctl releases watch 1.5.0`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body client.StartRolloutJSONRequestBody
			if canary != "" {
				body.Canary = &client.RolloutRequest_Canary{}
				if n, err := strconv.Atoi(canary); err == nil {
					_ = body.Canary.FromCanaryCount(n)
				} else {
					_ = body.Canary.FromCanaryPercent(canary)
				}
			}
			if cmd.Flags().Changed("max-in-flight") {
				// Sent whatever it is: one under 1 is the controller's 400,
				// not its default in place of what was typed.
				body.MaxInFlight = &inFlight
			}
			if deadline != "" {
				body.Deadline = &deadline
			}
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			r, err := c.StartRolloutWithResponse(cmd.Context(), args[0], body)
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusCreated); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			return a.showRollout(r.JSON201)
		},
	}
	rollout.Flags().StringVar(&canary, "canary", "", `how many machines go first: a count (1) or a percent ("10%")`)
	rollout.Flags().IntVar(&inFlight, "max-in-flight", 0, "machines upgrading at once after the canaries (controller's default: 1)")
	rollout.Flags().StringVar(&deadline, "deadline", "", "how long a machine has to report upgraded (controller's default: 10m)")

	var interval time.Duration
	watch := &cobra.Command{
		Use:   "watch VERSION",
		Short: "Follow a release's rollout with a progress bar per wave until it ends",
		Long: `Follow the release's latest rollout, polling every second, with a progress
bar per wave (a line per change when the output is not a terminal). Exits 0
when it is done; 2 when it halted (a machine failed or rolled back) or was
cancelled, printing the reason.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.watchRollout(cmd.Context(), args[0], interval)
		},
	}
	watch.Flags().DurationVar(&interval, "interval", time.Second, "how often to poll the rollout")
	show := &cobra.Command{
		Use:   "show VERSION",
		Short: "A host release: each platform's build, its state and why, and its rollout",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.showRelease(cmd.Context(), args[0])
		},
	}
	cmd.AddCommand(a.releasesList(), show, upload, rollout, watch)
	for _, action := range []struct{ name, short string }{
		{"pause", "Pause a release's running rollout: no more machines start"},
		{"resume", "Resume a release's paused rollout"},
		{"cancel", "Cancel a release's running or paused rollout; machines already upgraded keep it"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   action.name + " VERSION",
			Short: action.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.rolloutAction(cmd.Context(), args[0], action.name)
			},
		})
	}
	return cmd
}

// releaseState says a release's state word, a failed one with when.
func releaseState(r client.Release) string {
	switch {
	case r.State != client.ReleaseStateFailed:
		return string(r.State)
	case r.FailedAt == nil:
		return "failed (when not recorded)"
	}
	return "failed " + ago(r.FailedAt)
}

// showRelease shows a host release's builds (one a platform) and its
// latest rollout, if it has one.
func (a *app) showRelease(ctx context.Context, ver string) error {
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	all, _, err := collect[client.Release](0, func(cursor *string, n int) (*http.Response, []byte, error) {
		r, err := c.ListHostReleasesWithResponse(ctx, &client.ListHostReleasesParams{Limit: &n, Cursor: cursor})
		if err != nil {
			return nil, nil, err
		}
		return r.HTTPResponse, r.Body, nil
	})
	if err != nil {
		return err
	}
	var rs []client.Release
	for _, r := range all {
		if r.Version == ver {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return fmt.Errorf("no host release %s (meshctl releases ls lists them)", ver)
	}
	ro, err := c.GetRolloutWithResponse(ctx, ver)
	if err != nil {
		return reach(err)
	}
	if ro.StatusCode() != http.StatusNotFound {
		if err := expect(ro.HTTPResponse, ro.Body, http.StatusOK); err != nil {
			return err
		}
	}
	if a.jsonOut() {
		out := map[string]any{"releases": rs, "rollout": nil}
		if ro.JSON200 != nil {
			out["rollout"] = ro.JSON200
		}
		return a.encodeJSON(out)
	}
	rows := [][]string{{"PLATFORM", "STATE", "SCHEMAS", "SIZE", "DIGEST", "CREATED", "BY", "FAILURE"}}
	for _, r := range rs {
		rows = append(rows, []string{r.Os + "/" + r.Arch, releaseState(r), r.Schemas, strconv.Itoa(r.Size), r.Digest, ago(&r.CreatedAt), r.CreatedBy, r.Failure})
	}
	if err := a.table(rows); err != nil {
		return err
	}
	fmt.Fprintln(a.out)
	if ro.JSON200 == nil {
		fmt.Fprintf(a.out, "no rollout of %s yet (meshctl releases rollout %s)\n", ver, ver)
		return nil
	}
	return a.showRollout(ro.JSON200)
}

// rolloutAction pauses, resumes or cancels a release's rollout and shows
// what it became.
func (a *app) rolloutAction(ctx context.Context, version, action string) error {
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	var hr *http.Response
	var body []byte
	var ro *client.Rollout
	switch action {
	case "pause":
		var r *client.PauseRolloutResponse
		if r, err = c.PauseRolloutWithResponse(ctx, version); err == nil {
			hr, body, ro = r.HTTPResponse, r.Body, r.JSON200
		}
	case "resume":
		var r *client.ResumeRolloutResponse
		if r, err = c.ResumeRolloutWithResponse(ctx, version); err == nil {
			hr, body, ro = r.HTTPResponse, r.Body, r.JSON200
		}
	case "cancel":
		var r *client.CancelRolloutResponse
		if r, err = c.CancelRolloutWithResponse(ctx, version); err == nil {
			hr, body, ro = r.HTTPResponse, r.Body, r.JSON200
		}
	default:
		return fmt.Errorf("no rollout action %q", action)
	}
	if err != nil {
		return reach(err)
	}
	if err := expect(hr, body, http.StatusOK); err != nil {
		return err
	}
	if a.jsonOut() {
		return a.printJSON(body)
	}
	return a.showRollout(ro)
}

func (a *app) uploadRelease(ctx context.Context, ver, path, goos, goarch, schemas string) error {
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil {
		return err
	} else if !info.Mode().IsRegular() {
		// Read inside the upload's stream, it failed as the controller's
		// fault ("talking to the controller: … is a directory").
		return fmt.Errorf("%s: not a file (a mesh-host binary)", path)
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		pw.CloseWithError(func() error {
			for _, kv := range [][2]string{{"version", ver}, {"os", goos}, {"arch", goarch}, {"schemas", schemas}} {
				if err := mw.WriteField(kv[0], kv[1]); err != nil {
					return err
				}
			}
			w, err := mw.CreateFormFile("binary", "mesh-host")
			if err != nil {
				return err
			}
			if _, err := io.Copy(w, f); err != nil {
				return err
			}
			return mw.Close()
		}())
	}()
	r, err := c.CreateHostReleaseWithBodyWithResponse(ctx, mw.FormDataContentType(), pr)
	pr.Close()
	if err != nil {
		return reach(err)
	}
	if err := expect(r.HTTPResponse, r.Body, http.StatusCreated); err != nil {
		return err
	}
	if a.jsonOut() {
		return a.printJSON(r.Body)
	}
	x := r.JSON201
	return a.table([][]string{{"VERSION", "OS", "ARCH", "SCHEMAS", "DIGEST", "SIZE", "STATE"},
		{x.Version, x.Os, x.Arch, x.Schemas, x.Digest, strconv.Itoa(x.Size), string(x.State)}})
}

func (a *app) showRollout(r *client.Rollout) error {
	rows := [][]string{
		{"Rollout:", fmt.Sprintf("%d of %s (canary %s, %d in flight, deadline %s)", r.Id, r.Version, r.Canary, r.MaxInFlight, time.Duration(r.DeadlineSeconds)*time.Second)},
		{"State:", spanWords(string(r.State), &r.CreatedAt, r.FinishedAt) + " (made by " + r.CreatedBy + ")"},
	}
	if r.Reason != "" {
		rows = append(rows, []string{"Why:", r.Reason})
	}
	if err := a.table(rows); err != nil {
		return err
	}
	fmt.Fprintln(a.out)
	ms := [][]string{{"MACHINE", "WAVE", "STATE", "PREVIOUS", "REASON"}}
	for _, m := range r.Machines {
		w := string(m.State) + ", not reached yet"
		if m.State == client.RolloutMachineStateWithdrawn {
			w = "withdrawn, never reached"
		}
		if m.StartedAt != nil || m.FinishedAt != nil {
			w = spanWords(string(m.State), m.StartedAt, m.FinishedAt)
		}
		ms = append(ms, []string{m.Machine, waveName(m.Wave), w, firstNonEmpty(m.Previous, "-"), m.Reason})
	}
	return a.table(ms)
}

// spanWords says a rollout's or a machine's upgrade's state with since
// when, or when it ended: the word alone read the same a second or an
// hour on ("upgrading since 5s ago", "rolled back 1h ago").
func spanWords(state string, started, finished *time.Time) string {
	w := strings.ReplaceAll(state, "_", " ")
	if finished != nil {
		return w + " " + ago(finished)
	}
	return w + " since " + ago(started)
}

func (a *app) watchRollout(ctx context.Context, ver string, interval time.Duration) error {
	if interval <= 0 {
		return errors.New("--interval: a positive duration, like 1s")
	}
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	w := a.out
	if a.jsonOut() {
		w = a.errOut
	}
	view := newProgress(w, "release "+ver)
	var last *client.GetRolloutResponse
	err = poll(ctx, interval, a.errOut, func() (bool, error) {
		r, err := c.GetRolloutWithResponse(ctx, ver)
		if err != nil {
			return false, reach(err)
		}
		if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
			return false, err
		}
		last = r
		view.show("rollout: "+string(r.JSON200.State), waveGroups(r.JSON200))
		return r.JSON200.State != client.RolloutStateRunning && r.JSON200.State != client.RolloutStatePaused, nil
	})
	view.end()
	if err != nil {
		return err
	}
	if a.jsonOut() {
		if err := a.printJSON(last.Body); err != nil {
			return err
		}
	}
	r := last.JSON200
	if r.State == client.RolloutStateDone {
		if !a.jsonOut() {
			fmt.Fprintf(a.out, "release %s rolled out to %s\n", ver, rolledOutTo(r))
		}
		return nil
	}
	return &exitError{code: 2, msg: fmt.Sprintf("rollout of %s %s: %s", ver, r.State, firstNonEmpty(r.Reason, failures(r), "no reason given"))}
}

// rolledOutTo says how many machines a done rollout upgraded, and names
// how many of the rest it did not reach and why (a machine revoked or
// deleted meanwhile is withdrawn): each machine it listed was counted as
// rolled out to.
func rolledOutTo(r *client.Rollout) string {
	by := map[client.RolloutMachineState]int{}
	for _, m := range r.Machines {
		by[m.State]++
	}
	s := fmt.Sprintf("%d machine(s)", by[client.RolloutMachineStateUpgraded])
	var rest []string
	for _, st := range slices.Sorted(maps.Keys(by)) {
		if st != client.RolloutMachineStateUpgraded {
			rest = append(rest, fmt.Sprintf("%d %s", by[st], strings.ReplaceAll(string(st), "_", " ")))
		}
	}
	if len(rest) > 0 {
		s += " (not reached: " + strings.Join(rest, ", ") + ")"
	}
	return s
}

// failures names the machines that failed, when the rollout gives no reason.
func failures(r *client.Rollout) string {
	var s []string
	for _, m := range r.Machines {
		if m.State == client.RolloutMachineStateFailed || m.State == client.RolloutMachineStateRolledBack {
			s = append(s, m.Machine+" "+string(m.State)+": "+m.Reason)
		}
	}
	return strings.Join(s, "; ")
}

func waveGroups(r *client.Rollout) []group {
	waves := 0
	for _, m := range r.Machines {
		waves = max(waves, m.Wave+1)
	}
	gs := make([]group, waves)
	for i := range gs {
		gs[i].name = waveName(i)
	}
	for _, m := range r.Machines {
		g := &gs[m.Wave]
		g.total++
		switch m.State {
		case client.RolloutMachineStateUpgraded:
			g.done++
		case client.RolloutMachineStateUpgrading:
			g.busy++
		case client.RolloutMachineStateFailed, client.RolloutMachineStateRolledBack:
			g.failed++
		}
	}
	return gs
}

func waveName(w int) string {
	if w == 0 {
		return "canary"
	}
	return "wave " + strconv.Itoa(w)
}
