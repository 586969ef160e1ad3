package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"mesh/client"
)

func (a *app) logsCommand() *cobra.Command {
	var tail int
	cmd := &cobra.Command{
		Use:   "logs MACHINE [RESOURCE]",
		Short: "The last lines a machine's host shipped of a service, with when",
		Long: `Print the last lines of a service's output that the machine's host
shipped: a host ships them with its next report when a service fails,
restarts or turns unhealthy, and the controller keeps the latest. They
are as recent as the time shown, not live.

RESOURCE is the service resource's id (module.name, as 'machines show'
and the declaration name it). Without it, every service that shipped
lines is printed, each under a header. With one RESOURCE the header
(why and when) goes to stderr, so stdout holds only the lines.`,
		Example: "  meshctl logs m1 node-tools.service --tail 20\n  meshctl logs m1 -o json",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			params := &client.GetMachineLogsParams{}
			if cmd.Flags().Changed("tail") {
				params.Tail = &tail
			}
			if len(args) == 2 {
				params.Resource = &args[1]
			}
			r, err := c.GetMachineLogsWithResponse(cmd.Context(), args[0], params)
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			items := r.JSON200.Items
			if len(items) == 0 {
				fmt.Fprintf(a.errOut, "%s has shipped no lines of any service (a host ships them when a service fails, restarts or turns unhealthy)\n", args[0])
				return nil
			}
			for i, it := range items {
				head := a.out
				if len(args) == 2 {
					head = a.errOut
				} else if i > 0 {
					fmt.Fprintln(a.out)
				}
				logHeader(head, it, len(args) == 2)
				for _, l := range it.Lines {
					fmt.Fprintln(a.out, l)
				}
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&tail, "tail", "n", 100, "the last N lines of each service (1 to 100)")
	return cmd
}

// logHeader says which service the lines are of, why the host shipped
// them and when: "==> web.service: restarted, shipped 2m ago (…) <==".
func logHeader(w io.Writer, it client.ServiceLogView, single bool) {
	s := fmt.Sprintf("%s: %s, shipped %s (%s, generation %d)", it.Resource, it.Why, ago(&it.ShippedAt),
		it.ShippedAt.UTC().Format("2006-01-02 15:04:05Z"), it.Generation)
	if it.Truncated {
		s += "; older lines left out"
	}
	if single {
		fmt.Fprintln(w, s)
		return
	}
	fmt.Fprintln(w, "==> "+strings.TrimSpace(s)+" <==")
}
