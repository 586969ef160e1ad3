package main

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/spf13/cobra"

	"mesh/client"
)

// buildListCommands adds 'builds ls' and 'builds yank' to cmd.
func (a *app) buildListCommands(cmd *cobra.Command) {
	var limit int
	ls := &cobra.Command{
		Use:     "ls MODULE",
		Short:   "A module's builds, newest first, with their state (a yanked one with why)",
		Example: `  meshctl builds ls node-tools`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return errors.New("--limit: a number of builds from 1 up (0: all)")
			}
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			// Followed through its pages: --limit 0 sent limit=0, which the
			// API takes as 1, and a script asking for every build was told
			// of the newest alone.
			bs, raw, err := collect[client.Build](limit, func(cursor *string, n int) (*http.Response, []byte, error) {
				r, err := c.ListBuildsWithResponse(cmd.Context(), args[0], &client.ListBuildsParams{Limit: &n, Cursor: cursor})
				if err != nil {
					return nil, nil, err
				}
				return r.HTTPResponse, r.Body, nil
			})
			if err != nil {
				return err
			}
			return list(a, bs, raw, []string{"BUILD", "VERSION", "STATE", "COMMIT", "BY", "CREATED", "WHY"}, func(b client.Build) []string {
				why := ""
				if b.YankReason != nil {
					why = *b.YankReason
					if b.YankedBy != nil {
						why += " (" + *b.YankedBy + ")"
					}
				}
				return []string{strconv.Itoa(b.Number), b.Version, string(b.State), short(b.Commit), b.CreatedBy, ago(&b.CreatedAt), why}
			})
		},
	}
	ls.Flags().IntVar(&limit, "limit", 50, "how many builds (0: all)")
	var reason string
	yank := &cobra.Command{
		Use:   "yank MODULE BUILD --reason WHY",
		Short: "Mark a finished build bad: machines running it keep it, shown as yanked; nothing new is given it",
		Long: `Mark a finished build bad (operator). Machines that run it keep it and are
shown running a yanked build with the reason; no machine is given it from
now on, and a plan for it is refused.`,
		Example: `  meshctl builds yank node-tools 17 --reason "leaks file descriptors"`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || n < 1 {
				return fmt.Errorf("BUILD: a build number, got %q", args[1])
			}
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			r, err := c.YankBuildWithResponse(cmd.Context(), args[0], n, client.YankBuildJSONRequestBody{Reason: reason})
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			fmt.Fprintf(a.out, "%s build %d yanked: %s\n", args[0], n, reason)
			return nil
		},
	}
	yank.Flags().StringVar(&reason, "reason", "", "why the build is bad (shown with it)")
	_ = yank.MarkFlagRequired("reason")
	cmd.AddCommand(ls, yank)
}

// short is a commit's first 12 characters.
func short(commit string) string {
	return commit[:min(12, len(commit))]
}
