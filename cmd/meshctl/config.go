package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// config is what 'meshctl login' keeps: the controller and a person's
// token for it.
type config struct {
	Controller string    `json:"controller"`
	User       string    `json:"user,omitempty"`
	Token      string    `json:"token"`
	ExpiresAt  time.Time `json:"expires_at"`
	// CA is the mesh CA (PEM) found by its pin at login: requests to this
	// controller trust it alone. Empty for a controller a public CA serves.
	CA string `json:"ca,omitempty"`
}

// configPath is os.UserConfigDir()/mesh/config.json.
func configPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("finding the config dir: %w", err)
	}
	return filepath.Join(dir, "mesh", "config.json"), nil
}

// loadConfig reads the saved config; none saved is an empty config.
func loadConfig() (config, error) {
	var c config
	p, err := configPath()
	if err != nil {
		return c, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", p, err)
	}
	return c, nil
}

// saveConfig writes the config with mode 0600 in a directory of mode 0700:
// the token is a bearer secret. It is written to a temp file and renamed,
// so a crash never leaves half a config.
func saveConfig(c config) (string, error) {
	p, err := configPath()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	// MkdirAll keeps an existing dir's mode: tighten a looser one.
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, ".config-*.json") // created 0600
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name()) // after the rename, nothing to remove
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return p, os.Rename(f.Name(), p)
}

// target is the controller and token a command uses: --controller, else
// MESH_CONTROLLER, else the saved one; MESH_TOKEN, else the saved token —
// the saved token only for the controller it was issued by, so pointing
// meshctl at another URL never sends it there.
func (a *app) target() (url, token string, ca []byte, err error) {
	c, err := loadConfig()
	if err != nil {
		return "", "", nil, err
	}
	url = firstNonEmpty(a.controller, os.Getenv("MESH_CONTROLLER"), c.Controller)
	if url == "" {
		return "", "", nil, errors.New("no controller: run 'meshctl login URL --user NAME', or set --controller or MESH_CONTROLLER")
	}
	url = strings.TrimRight(url, "/")
	if err := checkControllerURL(url); err != nil {
		return "", "", nil, err
	}
	token = os.Getenv("MESH_TOKEN")
	same := strings.TrimRight(c.Controller, "/") == url
	if token == "" && same {
		token = c.Token
	}
	if same {
		ca = []byte(c.CA)
	}
	loginHint = "log in again: meshctl login " + url + " --user NAME"
	if os.Getenv("MESH_TOKEN") != "" {
		// A login saves a token MESH_TOKEN would still override.
		loginHint = "MESH_TOKEN is set and used instead of a saved login: make a new API token (meshctl tokens create --api NAME) or unset MESH_TOKEN"
	}
	if !same && c.Controller != "" && os.Getenv("MESH_TOKEN") == "" {
		// The saved token is for another controller, and is not sent here.
		loginHint = "the saved login is for " + c.Controller + ", not " + url + ": meshctl login " + url + " --user NAME, or set MESH_TOKEN"
	}
	return url, token, ca, nil
}

// checkControllerURL says what is wrong with a controller's URL in words
// (net/url's own, for "127.0.0.1:8080", are "first path segment in URL
// cannot contain colon").
func checkControllerURL(u string) error {
	p, err := neturl.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("controller %q: want a URL with its scheme, such as http://127.0.0.1:8080 or https://ctl.example.net:8443", u)
	}
	if strings.HasSuffix(p.Path, "/api/v1") || strings.Contains(p.Path, "/api/v1/") {
		// Every route is found under the controller's base URL.
		return fmt.Errorf("controller %q: give its base URL, without /api/v1 (%s://%s)", u, p.Scheme, p.Host)
	}
	return nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
