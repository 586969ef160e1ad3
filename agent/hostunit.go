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
// the stable path: every ExecStart it sets must be `<stable path> launch …`
// (an empty one only resets the list), and the last must not be a reset (a
// drop-in may set none). The unit is read as systemd reads it (see
// unitAssignments), so spacing around '=' or a continued line cannot slip
// another command past the check.
func checkHostUnit(d *models.DeclarationPayload, stateDir string) error {
	want := StablePath(stateDir) + " launch"
	for _, r := range d.Resources {
		if r.Kind != "file" || !isHostUnit(r.Path) || r.Content == nil {
			continue
		}
		joined, err := unitAssignments(*r.Content, true)
		if err != nil {
			return refuse("bad field: %s declares the host's unit %s, which cannot be read: %v", r.ID, r.Path, err)
		}
		// Each line on its own too: were a continuation read otherwise
		// than systemd reads it, a line taken here as part of another
		// key's value could be an ExecStart to systemd.
		lines, _ := unitAssignments(*r.Content, false)
		last, set := "", false
		for i, kv := range append(joined, lines...) {
			if !strings.EqualFold(kv[0], "ExecStart") {
				continue
			}
			v := kv[1]
			if i < len(joined) {
				last, set = v, true
			} else {
				v = strings.TrimSpace(strings.TrimSuffix(v, "\\"))
			}
			if v != "" && !startsStable(v, want) {
				return refuse("bad field: %s declares the host's unit %s starting %q; it must start the stable path: %s …, which the launcher flips to a release once that release has proved itself",
					r.ID, r.Path, v, want)
			}
		}
		if !set && path.Clean(r.Path) == unitDir+HostUnit {
			return refuse("bad field: %s declares the host's unit %s without an ExecStart; it must start %s", r.ID, r.Path, want)
		}
		if set && last == "" {
			return refuse("bad field: %s declares the host's unit %s whose last ExecStart only resets it; it must start the stable path: %s …",
				r.ID, r.Path, want)
		}
	}
	return nil
}

// startsStable says whether an ExecStart value is the stable path with
// launch and arguments of its own, one command (no ';' word, which an older
// systemd took to start a second command).
func startsStable(v, want string) bool {
	if v != want && !strings.HasPrefix(v, want+" ") && !strings.HasPrefix(v, want+"\t") {
		return false
	}
	for _, w := range strings.Fields(v) {
		if w == ";" {
			return false
		}
	}
	return true
}

// unitAssignments reads a unit file's assignments, in order, as systemd
// does: lines starting with '#' or ';' are comments, "[…]" opens a
// section, and a key is followed by optional whitespace, '=', and its
// value, trimmed of whitespace. With join, a line ending in a backslash
// goes on with the next (the backslash becomes a space; a comment line
// within is an error); without, each line is read on its own. The key
// keeps its case; which section a key is in is not kept (the check is
// stricter for it: an ExecStart anywhere counts).
func unitAssignments(content string, join bool) ([][2]string, error) {
	var out [][2]string
	add := func(line string) {
		if line == "" || strings.HasPrefix(line, "[") {
			return
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			out = append(out, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
		}
	}
	var cont strings.Builder
	continuing := false
	// systemd ends a line at a carriage return and at NUL too, and takes
	// some pairs of them ("\n\r", "\r\0") as one end: read as one line,
	// "ExecStart=<stable> launch\rExecStart=\rExecStart=/usr/bin/sleep
	// infinity" passed for the first, and read as two ends, a pair broke a
	// continuation systemd goes on with. A unit of the host holds neither.
	if i := strings.IndexAny(content, "\r\x00"); i >= 0 {
		return nil, fmt.Errorf("a carriage return or NUL at byte %d (systemd ends a line there, in ways that differ by what follows): write the unit with newlines only", i)
	}
	sc := bufio.NewScanner(strings.NewReader(content))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			if join && continuing {
				// systemd releases differ on whether it is skipped or
				// joined: a unit that leaves it to them is not taken.
				return nil, fmt.Errorf("a comment line within a continued line")
			}
			continue
		}
		if !join {
			add(line)
			continue
		}
		if continues(raw) {
			cont.WriteString(strings.TrimSpace(strings.TrimSuffix(raw, "\\")))
			cont.WriteByte(' ')
			continuing = true
			continue
		}
		if continuing {
			cont.WriteString(line)
			line, continuing = strings.TrimSpace(cont.String()), false
			cont.Reset()
		}
		add(line)
	}
	if continuing {
		add(strings.TrimSpace(cont.String()))
	}
	return out, sc.Err()
}

// continues says whether raw (a line as read, its newline gone) goes on
// with the next, as systemd's parser says it: its last character is a
// backslash that no backslash before it escapes. "X=a\\\\" ends in an
// escaped backslash and "X=a\\ " in a space: neither goes on.
func continues(raw string) bool {
	escaped := false
	for i := 0; i < len(raw); i++ {
		if escaped {
			escaped = false
		} else if raw[i] == '\\' {
			escaped = true
		}
	}
	return escaped
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
