package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"mesh/client"
)

// pushCommand makes a machine's next generation with the same content: a
// host that missed or lost what it was sent gets it again, composed afresh
// from the store.
func (a *app) pushCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "push MACHINE",
		Short: "Give a machine a new generation with the same content (its host applies it in full again)",
		Long: `Give a machine a new generation with the same content (trigger push),
composed afresh from the store; its host applies it in full again. Written
with If-Match on the generation just read; when the machine changed in
between (412), it is read again and pushed from there.`,
		Example: `  meshctl push m1`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			machine := args[0]
			for attempt := 1; ; attempt++ {
				got, err := c.GetMachineWithResponse(cmd.Context(), machine)
				if err != nil {
					return reach(err)
				}
				if err := expect(got.HTTPResponse, got.Body, http.StatusOK); err != nil {
					return err
				}
				etag := got.HTTPResponse.Header.Get("ETag")
				if etag == "" {
					etag = fmt.Sprintf(`"%d"`, got.JSON200.Generation)
				}
				r, err := c.PushMachineWithResponse(cmd.Context(), machine, &client.PushMachineParams{IfMatch: etag})
				if err != nil {
					return reach(err)
				}
				if r.StatusCode() == http.StatusPreconditionFailed && attempt < maxAttempts {
					fmt.Fprintf(a.errOut, "%s changed since it was read at generation %s; reading it again\n", machine, strings.Trim(etag, `"`))
					continue
				}
				if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
					return err
				}
				if a.jsonOut() {
					return a.printJSON(r.Body)
				}
				fmt.Fprintf(a.out, "%s: generation %d (push)\n", machine, r.JSON200.Generation)
				return nil
			}
		},
	}
}
