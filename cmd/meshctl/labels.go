package main

import (
	"fmt"
	"maps"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"mesh/client"
)

func (a *app) labelCommand() *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "label MACHINE [KEY=VALUE | KEY-]...",
		Short: "Show or change a machine's labels (operator to change)",
		Long: `With no label arguments, show the machine's labels. KEY=VALUE sets a
label, KEY- removes one; the others stay. meshctl reads the labels and
generation, applies this edit and writes with If-Match; when the machine
changed in between (412) it reads again and re-applies only this edit.

The machine gains the modules whose selectors now match and loses those
that no longer do (never one a person assigned it), with a new generation
(trigger label). --dry-run shows which, and changes nothing.`,
		Example: `  meshctl machines label m1
  meshctl machines label m1 role=web zone=a --dry-run
  meshctl machines label m1 zone-`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			edit, err := parseLabelArgs(args[1:], true)
			if err != nil {
				return err
			}
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			for attempt := 1; ; attempt++ {
				got, err := c.GetLabelsWithResponse(ctx, args[0])
				if err != nil {
					return reach(err)
				}
				if err := expect(got.HTTPResponse, got.Body, http.StatusOK); err != nil {
					return err
				}
				if len(edit) == 0 {
					if a.jsonOut() {
						return a.printJSON(got.Body)
					}
					return a.labelTable(got.JSON200.Labels)
				}
				labels := maps.Clone(map[string]string(got.JSON200.Labels))
				if labels == nil {
					labels = map[string]string{}
				}
				for k, v := range edit {
					if v == "" {
						delete(labels, k)
					} else {
						labels[k] = v
					}
				}
				params := &client.SetLabelsParams{IfMatch: got.HTTPResponse.Header.Get("ETag")}
				if dryRun {
					params.DryRun = &dryRun
				}
				put, err := c.SetLabelsWithResponse(ctx, args[0], params, client.SetLabelsJSONRequestBody{Labels: labels})
				if err != nil {
					return reach(err)
				}
				if put.StatusCode() == http.StatusPreconditionFailed && attempt < maxAttempts {
					fmt.Fprintf(a.errOut, "%s changed since it was read; reading it again and re-applying this edit\n", args[0])
					continue
				}
				if err := expect(put.HTTPResponse, put.Body, http.StatusOK); err != nil {
					return err
				}
				if a.jsonOut() {
					return a.printJSON(put.Body)
				}
				if put.JSON200.DryRun {
					fmt.Fprintf(a.out, "%s would have: %s (dry run: nothing written)\n", args[0], orDash(formatLabels(labels)))
				} else {
					fmt.Fprintf(a.out, "%s: generation %s; labels %s\n", args[0], strings.Trim(put.HTTPResponse.Header.Get("ETag"), `"`), orDash(formatLabels(labels)))
				}
				return a.changesTable(put.JSON200.Changes)
			}
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show which modules the machine would gain or lose; change nothing")
	return cmd
}

func (a *app) labelTable(labels map[string]string) error {
	rows := [][]string{{"KEY", "VALUE"}}
	for _, kv := range strings.Split(formatLabels(labels), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			rows = append(rows, []string{k, v})
		}
	}
	return a.table(rows)
}
