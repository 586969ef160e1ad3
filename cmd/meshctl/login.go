package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"mesh/client"
	"mesh/meshca"
)

func (a *app) loginCommand() *cobra.Command {
	var user, pin string
	var stdin bool
	cmd := &cobra.Command{
		Use:   "login [URL] --user NAME [--ca-pin sha256:…]",
		Short: "Log in to a controller and keep the token in your config dir",
		Long: `Log in with a user's password and keep the token (12 hours) in
os.UserConfigDir()/mesh/config.json (mode 0600, its directory 0700), for the
controller it came from only. The password is read from a prompt without
echo, or from stdin with --password-stdin. URL defaults to --controller or
MESH_CONTROLLER.

A controller serving TLS under the mesh's own CA is reached with --ca-pin,
the pin a join token answer gives (sha256 of the CA's public key): the CA
is found in the chain the controller presents, checked against the pin
before the password is sent, kept in the config, and trusted alone for that
controller from then on (kubeadm's discovery-token-ca-cert-hash). Without
it, the system's roots judge the controller (an operator's certificate).`,
		Example: `  meshctl login http://127.0.0.1:8080 --user alice
  meshctl login https://ctl1:8443 --user alice --ca-pin sha256:715988ea…
  echo "$PASSWORD" | meshctl login https://mesh.example.com --user ci --password-stdin`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			url := firstNonEmpty(append(args, a.controller, os.Getenv("MESH_CONTROLLER"))...)
			if url == "" {
				return errors.New("which controller? meshctl login URL --user NAME")
			}
			url = strings.TrimRight(url, "/")
			if err := checkControllerURL(url); err != nil {
				return err
			}
			pw, err := a.password(stdin, "Password: ", false)
			if err != nil {
				return err
			}
			var caPEM []byte
			if pin != "" {
				if caPEM, err = discoverCA(cmd.Context(), url, pin); err != nil {
					return err
				}
			}
			c, err := newClient(url, "", caPEM)
			if err != nil {
				return err
			}
			r, err := c.LoginWithResponse(cmd.Context(), client.LoginJSONRequestBody{Username: user, Password: pw})
			if err != nil {
				return reach(err)
			}
			// A refused login is this login: "log in again" would say nothing.
			loginHint = "check the user name and password"
			if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
				return err
			}
			p, err := saveConfig(config{Controller: url, User: user, Token: r.JSON200.Token, ExpiresAt: r.JSON200.ExpiresAt, CA: string(caPEM)})
			if err != nil {
				return fmt.Errorf("saving the token: %w", err)
			}
			if a.jsonOut() {
				// The token stays in the file: not echoed into scripts' logs.
				return a.encodeJSON(map[string]any{"controller": url, "user": user, "expires_at": r.JSON200.ExpiresAt, "config": p})
			}
			fmt.Fprintf(a.out, "Logged in to %s as %s until %s.\nToken saved in %s.\n", url, user,
				r.JSON200.ExpiresAt.Local().Format(localTime), p)
			return nil
		},
	}
	cmd.Flags().StringVarP(&user, "user", "u", "", "the user to log in as")
	cmd.Flags().BoolVar(&stdin, "password-stdin", false, "read the password from stdin (its first line)")
	cmd.Flags().StringVar(&pin, "ca-pin", "", "the mesh CA's pin (sha256:…), for a controller serving TLS under its own CA")
	_ = cmd.MarkFlagRequired("user")
	return cmd
}

// discoverCA finds the CA with the pin in the chain an https controller
// presents, verifying the controller's certificate against it for the URL's
// host (meshca.Discover: nothing is sent but a ClientHello).
func discoverCA(ctx context.Context, rawURL, pin string) ([]byte, error) {
	u, err := neturl.Parse(rawURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("--ca-pin needs an https:// controller URL, got %q", rawURL)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "443")
	}
	ca, err := meshca.Discover(ctx, addr, u.Hostname(), pin)
	if err != nil {
		return nil, err
	}
	return meshca.EncodePEM(ca), nil
}

// password reads a password: the first line of stdin, or a prompt without
// echo when stdin is a terminal (twice when confirm).
func (a *app) password(fromStdin bool, prompt string, confirm bool) (string, error) {
	if fromStdin {
		line, err := bufio.NewReader(a.in).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		pw := strings.TrimRight(line, "\r\n")
		if pw == "" {
			return "", errors.New("--password-stdin: stdin gave no password")
		}
		return pw, nil
	}
	f, ok := a.in.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return "", errors.New("stdin is not a terminal: give the password with --password-stdin")
	}
	read := func(p string) (string, error) {
		fmt.Fprint(a.errOut, p)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.errOut)
		return string(b), err
	}
	pw, err := read(prompt)
	if err != nil {
		return "", err
	}
	if confirm {
		again, err := read("Again: ")
		if err != nil {
			return "", err
		}
		if again != pw {
			return "", errors.New("the passwords differ")
		}
	}
	return pw, nil
}

func (a *app) tokensCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "tokens", Short: "Join tokens, with which hosts enrol (admin)"}
	var expiresIn string
	create := &cobra.Command{
		Use:   "create [--expires-in 24h]",
		Short: "Make a single-use join token for 'mesh-host enroll'",
		Long:  "Make a single-use, expiring join token. It is shown only once.",
		Example: `  meshctl tokens create --expires-in 2h
  TOKEN=$(meshctl tokens create -o json | jq -r .token)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			var body client.CreateJoinTokenJSONRequestBody
			if expiresIn != "" {
				body.ExpiresIn = &expiresIn
			}
			if err := joinTokenLabels(cmd, &body); err != nil {
				return err
			}
			r, err := c.CreateJoinTokenWithResponse(cmd.Context(), body)
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusCreated); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			if r.JSON201.Command == "" { // an API token: no enrolment lines
				return a.table([][]string{{"ID", "TOKEN", "EXPIRES"}, {strconv.Itoa(r.JSON201.Id), r.JSON201.Token, r.JSON201.ExpiresAt.Local().Format(localTime)}})
			}
			if err := a.table([][]string{{"ID", "TOKEN", "EXPIRES", "CA PIN"}, {strconv.Itoa(r.JSON201.Id), r.JSON201.Token, r.JSON201.ExpiresAt.Local().Format(localTime), r.JSON201.CaPin}}); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "\nEnrol a machine that has mesh-host:\n  %s\n", r.JSON201.Command)
			if r.JSON201.Install != nil {
				fmt.Fprintf(a.out, "\nOr install mesh-host from this controller and enrol, in one line:\n  %s\n", *r.JSON201.Install)
			}
			return nil
		},
	}
	create.Flags().StringVar(&expiresIn, "expires-in", "", "how long the token is good for, a Go duration (join: default 24h, at most 720h; API: default 2160h, at most 8760h)")
	cmd.AddCommand(create)
	a.addTokenCommands(cmd, create, &expiresIn)
	return cmd
}

func (a *app) usersCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "users", Short: "People who log in (admin; passwd, anyone's own)"}
	var role string
	var stdin bool
	add := &cobra.Command{
		Use:   "add NAME --role viewer|operator|admin|builder",
		Short: "Add a user",
		Long: `Add a user. Roles: viewer (read), operator (assign, plans, builds),
admin (users, join tokens, machines, releases), builder (a CI runner).
The password (12 characters to 72 bytes) comes from a prompt without echo,
or from stdin with --password-stdin.`,
		Example: `  echo "$PASSWORD" | meshctl users add carol --role operator --password-stdin`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			pw, err := a.password(stdin, "Password for "+args[0]+": ", true)
			if err != nil {
				return err
			}
			r, err := c.CreateUserWithResponse(cmd.Context(), client.CreateUserJSONRequestBody{
				Name: args[0], Role: client.UserRequestRole(role), Password: pw})
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusCreated); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			return a.table([][]string{{"NAME", "ROLE", "CREATED"}, {r.JSON201.Name, r.JSON201.Role, ago(&r.JSON201.CreatedAt)}})
		},
	}
	add.Flags().StringVar(&role, "role", "", "viewer, operator, admin or builder")
	add.Flags().BoolVar(&stdin, "password-stdin", false, "read the password from stdin (its first line)")
	_ = add.MarkFlagRequired("role")
	_ = add.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"viewer", "operator", "admin", "builder"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.AddCommand(add, a.passwdCommand())
	a.addUserCommands(cmd)
	return cmd
}
