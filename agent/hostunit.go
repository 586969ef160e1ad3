package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path"
	"strings"

	"mesh/models"
)

// The systemd unit beside the host is declared like any other file: a
// `file` resource at /etc/systemd/system/mesh-host.service (or a drop-in
// under mesh-host.service.d/). Two rules make that safe without a kind of
// its own: after an apply that created, updated or removed a unit file
// under /etc/systemd/system the host runs `systemctl daemon-reload`, so
// the next start of the unit (a restart, a reboot) runs what was declared;
// and a declared unit of the host itself must start the stable path with
// `launch`, or the declaration is refused whole — a unit that started
// anything else would take the machine out of the mesh's hands at its next
// restart, beyond the reach of any rollback.

// unitDir is where declared units go (systemd's directory for the
// administrator's units, which overrides the packaged one).
const unitDir = "/etc/systemd/system/"

// HostUnit is the unit that runs the launcher.
const HostUnit = "mesh-host.service"

var unitSuffixes = []string{".service", ".socket", ".timer", ".path", ".target", ".mount", ".slice"}

// isUnitFile says whether a declared path is a systemd unit or drop-in that
// systemd reads only after a daemon-reload.
func isUnitFile(p string) bool {
	p = path.Clean(p)
	if !strings.HasPrefix(p, unitDir) {
		return false
	}
	rest := strings.TrimPrefix(p, unitDir)
	dir, file := path.Split(rest)
	if dir == "" {
		for _, s := range unitSuffixes {
			if strings.HasSuffix(file, s) {
				return true
			}
		}
		return false
	}
	return strings.HasSuffix(dir, ".d/") && strings.Count(dir, "/") == 1 && strings.HasSuffix(file, ".conf")
}

// isHostUnit says whether a declared path is the host's own unit or one
// of its drop-ins.
func isHostUnit(p string) bool {
	p = path.Clean(p)
	return p == unitDir+HostUnit || path.Dir(p) == unitDir+HostUnit+".d"
}

// checkHostUnit refuses a declared unit of the host that does not start
// the stable path: its last ExecStart= (a drop-in may set none; an empty
// one only resets) must be `<stable path> launch …`.
func checkHostUnit(d *models.DeclarationPayload, stateDir string) error {
	want := StablePath(stateDir) + " launch"
	for _, r := range d.Resources {
		if r.Kind != "file" || !isHostUnit(r.Path) || r.Content == nil {
			continue
		}
		last, set := "", false
		sc := bufio.NewScanner(strings.NewReader(*r.Content))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
				last, set = strings.TrimSpace(v), true
			}
		}
		if !set && path.Clean(r.Path) == unitDir+HostUnit {
			return refuse("bad field: %s declares the host's unit %s without an ExecStart; it must start %s", r.ID, r.Path, want)
		}
		if set && last != want && !strings.HasPrefix(last, want+" ") {
			return refuse("bad field: %s declares the host's unit %s starting %q; it must start the stable path: %s …, which the launcher flips to a release once that release has proved itself",
				r.ID, r.Path, last, want)
		}
	}
	return nil
}

// daemonReload makes systemd read the unit files an apply changed.
func (a *Agent) daemonReload(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, a.cfg.Systemctl, "daemon-reload")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("a unit file changed and %s daemon-reload failed: %v: %s", a.cfg.Systemctl, err, strings.TrimSpace(out.String()))
	}
	return nil
}
