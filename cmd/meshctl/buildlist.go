package main

import (
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
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			r, err := c.ListBuildsWithResponse(cmd.Context(), args[0], &client.ListBuildsParams{Limit: &limit})
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			rows := [][]string{{"BUILD", "VERSION", "STATE", "COMMIT", "BY", "CREATED", "WHY"}}
			for _, b := range r.JSON200.Items {
				why := ""
				if b.YankReason != nil {
					why = *b.YankReason
					if b.YankedBy != nil {
						why += " (" + *b.YankedBy + ")"
					}
				}
				rows = append(rows, []string{strconv.Itoa(b.Number), b.Version, string(b.State), short(b.Commit), b.CreatedBy, ago(&b.CreatedAt), why})
			}
			return a.table(rows)
		},
	}
	ls.Flags().IntVar(&limit, "limit", 50, "how many (1..500)")
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
