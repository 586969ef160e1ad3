package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"mesh/client"
)

// The record: every send (a declaration delivered), every report a host
// made, and the declaration a machine's generation composes to. They are
// what settles "what was this machine sent, and what did its host say?"
// without the dashboard.

// sendsCommand lists the sends, the fleet's or one machine's, newest first.
func (a *app) sendsCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "sends [MACHINE] [--limit N]",
		Short: "Every declaration sent, newest first: to which machine, which generation, why, and what its host said (viewer)",
		Long: `List the sends, newest first: each is one declaration delivered to a
host (a poll answered with 200), written before its bytes left. OUTCOME
is the latest final report naming the send ("-" while its host has not
said). With MACHINE, only the sends to it.`,
		Example: "  meshctl sends\n  meshctl sends web-1 --limit 10\n  meshctl sends -o json",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return errors.New("--limit: a number of sends from 1 up")
			}
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			ss, raw, err := collect[client.Send](limit, func(cursor *string, n int) (*http.Response, []byte, error) {
				if len(args) == 1 {
					r, err := c.ListMachineSendsWithResponse(cmd.Context(), args[0], &client.ListMachineSendsParams{Limit: &n, Cursor: cursor})
					if err != nil {
						return nil, nil, err
					}
					return r.HTTPResponse, r.Body, nil
				}
				r, err := c.ListSendsWithResponse(cmd.Context(), &client.ListSendsParams{Limit: &n, Cursor: cursor})
				if err != nil {
					return nil, nil, err
				}
				return r.HTTPResponse, r.Body, nil
			})
			if err != nil {
				return err
			}
			return list(a, ss, raw, []string{"WHEN", "MACHINE", "GENERATION", "TRIGGER", "SCHEMA", "INSTANCE", "OUTCOME", "SEND", "DIGEST"}, func(s client.Send) []string {
				outcome := firstNonEmpty(s.Outcome, "-")
				if s.Reason != "" {
					outcome += ": " + clip(s.Reason, 60)
				}
				return []string{s.Time.Local().Format(localTime), s.Machine, strconv.Itoa(s.Generation), string(s.Trigger),
					strconv.Itoa(s.Schema), s.Instance, outcome, s.Id, clip(s.Digest, 19)}
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "how many sends at most")
	return cmd
}

// reportsCommand lists a machine's reports, newest first.
func (a *app) reportsCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:     "reports NAME [--limit N]",
		Short:   "What a machine's host reported after each apply, refusal or upgrade, newest first (viewer)",
		Example: "  meshctl machines reports web-1\n  meshctl machines reports web-1 --limit 5 -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return errors.New("--limit: a number of reports from 1 up")
			}
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			rs, raw, err := collect[client.ReportView](limit, func(cursor *string, n int) (*http.Response, []byte, error) {
				r, err := c.ListMachineReportsWithResponse(cmd.Context(), args[0], &client.ListMachineReportsParams{Limit: &n, Cursor: cursor})
				if err != nil {
					return nil, nil, err
				}
				return r.HTTPResponse, r.Body, nil
			})
			if err != nil {
				return err
			}
			return list(a, rs, raw, []string{"RECEIVED", "GENERATION", "OUTCOME", "CHECKS", "SEND", "REASON"}, func(r client.ReportView) []string {
				return []string{r.ReceivedAt.Local().Format(localTime), strconv.Itoa(r.Generation), r.Outcome, checksWords(r.Report.Checks),
					firstNonEmpty(r.Send, "-"), clip(r.Reason, 100)}
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "how many reports at most")
	return cmd
}

// declarationCommand prints the declaration a machine's current
// generation composes to, as its host would be sent it: a preview, no send.
func (a *app) declarationCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "declaration NAME",
		Short: "The declaration of a machine's current generation, as its host would be sent it (a preview: nothing is sent) (viewer)",
		Long: `Print the declaration the machine's current generation composes to:
its resources, the target host release, and what it was composed from.
It is a preview: no send is made and the host is not woken. The line on
stderr says the generation, what made it, and the declaration's digest
(a send of this generation names the same one); -o json prints the
API's answer, the envelope included.`,
		Example: "  meshctl machines declaration web-1\n  meshctl machines declaration web-1 -o json | jq .declaration.resources",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			r, err := c.PreviewDeclarationWithResponse(cmd.Context(), args[0])
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			// The declaration as the controller sent it, not as this
			// build of meshctl would encode it again.
			var p struct {
				Declaration json.RawMessage
			}
			if err := json.Unmarshal(r.Body, &p); err != nil {
				return reach(err)
			}
			v := r.JSON200
			fmt.Fprintf(a.errOut, "%s at generation %d (%s); digest %s\n", args[0], v.Generation, shown(v.Trigger), v.Digest)
			return a.printJSON(p.Declaration)
		},
	}
}

// checksWords says a report's checks in a cell: "-" for none, "2 passing",
// or each failing one with what it said ("1 passing; failing web.service:
// dial tcp …: connection refused").
func checksWords(cs *[]client.Report_Checks_Item) string {
	if cs == nil || len(*cs) == 0 {
		return "-"
	}
	passing := 0
	var failing []string
	for _, c := range *cs {
		if c.Ok != nil && *c.Ok {
			passing++
			continue
		}
		w := "failing"
		if c.Resource != nil {
			w += " " + *c.Resource
		}
		if c.Detail != nil && *c.Detail != "" {
			w += ": " + *c.Detail
		}
		failing = append(failing, w)
	}
	out := fmt.Sprintf("%d passing", passing)
	if len(failing) > 0 {
		out += "; " + strings.Join(failing, "; ")
	}
	return clip(out, 80)
}
