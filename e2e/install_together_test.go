package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"mesh/store"
)

// TestInstall_SeveralMachinesOnOneAddressAtOnce: machines that share an
// address (several on one box, a rack behind one NAT, a provisioning tool
// running the line on a handful at once) each run the join token's
// install line at once. With the install requests paced at 10 at once and
// binary downloads bounded at 4 an address, and the line and the script
// retrying nothing, some failed; each line installs and enrols its
// machine.
func TestInstall_SeveralMachinesOnOneAddressAtOnce(t *testing.T) {
	for _, tool := range []string{"curl", "openssl", "sha256sum", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	c := startControllerTLS(t, store.SQLite)
	c.release("mesh-host", "1.0.0")
	work := t.TempDir()

	const machines = 6
	lines := make([]string, machines)
	for i := range lines {
		lines[i] = c.installLine()
	}
	outs := make([]string, machines)
	errs := make([]error, machines)
	var wg sync.WaitGroup
	for i := range lines {
		wg.Add(1)
		dir := filepath.Join(work, fmt.Sprint("d", i)) // each machine's own working directory
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer wg.Done()
			outs[i], errs[i] = runInstall(t, lines[i], dir, "--prefix", filepath.Join(work, fmt.Sprint("m", i)), "--name", fmt.Sprint("box-", i))
		}()
	}
	wg.Wait()
	for i := range lines {
		if _, err := os.Stat(filepath.Join(work, fmt.Sprint("m", i), "var/lib/mesh-host/host.json")); errs[i] != nil || err != nil {
			t.Errorf("machine box-%d, installed at once with %d others from one address: exit %v, enrolled: %v\n%s", i, machines-1, errs[i], err, outs[i])
		}
	}
}

// TestInstall_ALineWhoseScriptIsNotFetchedFails: the line piped the script
// to sh (curl … | sh -s -- …): when curl failed (a refusal, an outage),
// sh ran an empty script and the line exited 0 having installed nothing —
// a provisioning tool took the machine for enrolled. The script is saved,
// then run.
func TestInstall_ALineWhoseScriptIsNotFetchedFails(t *testing.T) {
	for _, tool := range []string{"curl", "openssl", "sha256sum", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	c := startControllerTLS(t, store.SQLite)
	c.release("mesh-host", "1.0.0")
	work := t.TempDir()
	line := strings.Replace(c.installLine(), "/install.sh'", "/install-gone.sh'", 1) // the URL's: a 404, curl -f fails
	prefix := filepath.Join(work, "p")
	out, err := runInstall(t, line, work, "--prefix", prefix, "--name", "late")
	_, statErr := os.Stat(filepath.Join(prefix, "var/lib/mesh-host/host.json"))
	if err == nil {
		t.Fatalf("the install line exited 0 though its script was not fetched (installed: %v); it said:\n%s", statErr == nil, strings.TrimSpace(out))
	}
}
