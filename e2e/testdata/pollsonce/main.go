// Command pollsonce is a broken host release for the mixed-fleet test: on
// trial it polls once as a host that decodes schemas 1 and 2 would — so
// the controller sees its machine's schemas change and composes for them
// — then crashes before applying anything or reporting upgraded, and the
// launcher puts known-good back. It leaves what it was sent in
// trial-poll.json in the state directory, for the test to tell the
// trial's send from the restored host's.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"mesh/agent"
	"mesh/meshca"
	"mesh/models"
	"mesh/version"
)

func main() {
	if err := pollOnce(); err != nil {
		fmt.Fprintln(os.Stderr, "pollsonce:", err)
	}
	fmt.Fprintln(os.Stderr, "pollsonce: crashing on purpose")
	os.Exit(1)
}

func pollOnce() error {
	state := "" // run's --state, as the launcher passes it on
	for i, a := range os.Args {
		if v, ok := strings.CutPrefix(a, "--state="); ok {
			state = v
		} else if a == "--state" && i+1 < len(os.Args) {
			state = os.Args[i+1]
		}
	}
	if state == "" {
		return fmt.Errorf("no --state in %q", os.Args)
	}
	id, err := agent.LoadIdentity(state)
	if err != nil {
		return err
	}
	st, err := agent.LoadState(state)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	if id.CA != "" {
		ca, err := meshca.ParsePEM([]byte(id.CA))
		if err != nil {
			return err
		}
		hc.Transport = &http.Transport{TLSClientConfig: meshca.ClientConfig(ca)}
	}
	// Until a declaration comes (a few tries, well inside the trial's
	// deadline): the test needs to know what the trial was sent.
	var b []byte
	var send string
	for try := 1; ; try++ {
		b, send, err = poll(hc, id, st.Finished)
		if err == nil {
			break
		}
		fmt.Fprintln(os.Stderr, "pollsonce:", err)
		if try == 5 {
			return err
		}
		time.Sleep(time.Second)
	}
	var env models.Envelope
	var p models.DeclarationPayload
	if err := json.Unmarshal(b, &env); err != nil {
		return err
	}
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return err
	}
	out, _ := json.Marshal(map[string]any{"send": send, "generation": p.Generation, "schema": p.Schema})
	return os.WriteFile(filepath.Join(state, "trial-poll.json"), out, 0o600)
}

// poll asks for the declaration after generation finished as a host of
// this version that decodes schemas 1 and 2; it returns the body and the
// send, or why there was none.
func poll(hc *http.Client, id *agent.Identity, finished int64) ([]byte, string, error) {
	req, err := http.NewRequest("GET", id.Controllers[0]+"/api/v1/host/declaration?wait=5s", nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+id.Token)
	req.Header.Set("If-None-Match", fmt.Sprintf(`"%d"`, finished))
	req.Header.Set("X-Mesh-Host-Version", version.Version)
	req.Header.Set("X-Mesh-Schema", "1,2")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("poll: %s: %s", resp.Status, b)
	}
	return b, resp.Header.Get("X-Mesh-Send"), nil
}
