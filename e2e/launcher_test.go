package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/agent"
	"mesh/controller/ctltest"
	"mesh/store"
)

// launcherFile is the part of launcher.json this test reads.
type launcherFile struct {
	KnownGood     string          `json:"known_good"`
	Launcher      string          `json:"launcher"`
	LauncherTrial json.RawMessage `json:"launcher_trial"`
	HostPID       int             `json:"host_pid"`
}

func readLauncher(t *testing.T, h *hostProc) launcherFile {
	t.Helper()
	var l launcherFile
	b, err := os.ReadFile(filepath.Join(h.State, "launcher.json"))
	if err != nil || json.Unmarshal(b, &l) != nil {
		t.Fatalf("launcher.json: %v", err)
	}
	return l
}

// exeOf is the binary a process runs now (/proc/<pid>/exe).
func exeOf(t *testing.T, pid int) string {
	t.Helper()
	p, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	return p
}

// launcherVersions are the launcher_version of m's reports, newest first.
func (c *controllerProc) launcherVersions(machine string) []string {
	c.t.Helper()
	var l struct {
		Items []struct {
			Outcome string `json:"outcome"`
			Report  struct {
				LauncherVersion string `json:"launcher_version"`
			} `json:"report"`
		}
	}
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/" + machine + "/reports?limit=500", Token: c.Admin}, 200, &l)
	var vs []string
	for _, r := range l.Items {
		vs = append(vs, r.Outcome+"@"+r.Report.LauncherVersion)
	}
	return vs
}

// TestLauncher_FollowsTheReleaseInPlace: a host under `mesh-host launch`
// is upgraded twice by rollouts (1.0.0 → 2.0.0 → 2.1.0). Each time, once
// the release has won its trial, the launcher re-executes itself as that
// release: the same process (its pid unchanged, its binary now the
// release's), the host it ran adopted rather than a second one started, the
// service started under 1.0.0 never restarted. The stable path the service
// manager starts is flipped to each new launcher once its own trial is
// done, and the host's reports carry the launcher's version. A restart of
// the service then runs the flipped path: launcher and host 2.1.0.
func TestLauncher_FollowsTheReleaseInPlace(t *testing.T) {
	c := startController(t, store.SQLite)
	nodeTools(t, c)
	h := enroll(t, c, "m1", c.URL)
	h.launch = true
	h.start("--trial-deadline", "30s")
	port := freePort(t)
	c.setVars("m1", map[string]string{"port": port})
	c.assign("m1", "node-tools")
	c.waitApplied("m1", 30*time.Second)
	waitFor(t, 10*time.Second, "the service", func() bool { return listening(port) })
	svc := svcPID(t, h)
	launcherPID := h.cmd.Process.Pid
	stable := agent.StablePath(h.State)
	if got, _ := os.Readlink(stable); got != filepath.Join(bin, "mesh-host") {
		t.Fatalf("the stable path names %q before any upgrade", got)
	}
	if l := readLauncher(t, h); l.Launcher != "1.0.0" {
		t.Fatalf("launcher.json says launcher %q", l.Launcher)
	}

	for _, r := range []struct{ file, version, from string }{
		{"mesh-host-2", "2.0.0", "1.0.0"},
		{"mesh-host-2.1", "2.1.0", "2.0.0"},
	} {
		hostBefore := readLauncher(t, h).HostPID
		c.release(r.file, r.version)
		c.rollout(r.version)
		if v := c.waitRollout(r.version, 90*time.Second, "done", "halted"); v.State != "done" {
			t.Fatalf("rollout of %s: %+v", r.version, v)
		}
		staged := filepath.Join(h.State, "versions", r.version, "mesh-host")
		waitFor(t, 60*time.Second, "the launcher on "+r.version+" and the stable path flipped to it", func() bool {
			l := readLauncher(t, h)
			got, _ := os.Readlink(stable)
			return l.Launcher == r.version && string(l.LauncherTrial) == "" && got == staged
		})
		if exitedEarly(launcherPID) || exeOf(t, launcherPID) != staged {
			t.Fatalf("launcher pid %d does not run %s", launcherPID, staged)
		}
		// The host that won the trial is the one running: adopted, not
		// started again by the re-executed launcher.
		l := readLauncher(t, h)
		if l.HostPID == hostBefore || exitedEarly(l.HostPID) || exeOf(t, l.HostPID) != staged {
			t.Fatalf("the host after %s: pid %d (before %d)", r.version, l.HostPID, hostBefore)
		}
		if n := strings.Count(h.log.String(), "msg=launched "); n != 1 {
			t.Fatalf("known-good hosts were started %d times (once, at the start, is right)", n)
		}
		if !strings.Contains(h.log.String(), `msg="adopted the running host" pid=`+strconv.Itoa(l.HostPID)) {
			t.Fatalf("the launcher %s did not adopt host %d", r.version, l.HostPID)
		}
		if got := svcPID(t, h); got != svc || copies(port) != 1 {
			t.Fatalf("the service changed across the upgrade to %s (pid %d → %d, %d copies)", r.version, svc, got, copies(port))
		}
		if c.hostVersion("m1") != r.version {
			t.Fatalf("m1 reports host %s", c.hostVersion("m1"))
		}
	}
	// The upgraded report of 2.1.0 was sent under the launcher 2.0.0 had
	// become; a new generation is reported under launcher 2.1.0.
	if vs := strings.Join(c.launcherVersions("m1"), " "); !strings.Contains(vs, "upgraded@2.0.0") || !strings.Contains(vs, "upgraded@1.0.0") {
		t.Fatalf("reports (outcome@launcher): %s", vs)
	}
	c.setVars("m1", map[string]string{"port": port, "note": "after"})
	c.waitApplied("m1", 30*time.Second)
	if vs := c.launcherVersions("m1"); len(vs) == 0 || vs[0] != "applied@2.1.0" {
		t.Fatalf("the latest report (outcome@launcher): %v", vs)
	}
	if m := c.machine("m1"); m.LauncherVersion != "2.1.0" {
		t.Fatalf("the machine says launcher %q, its latest report 2.1.0", m.LauncherVersion)
	}
	if svcPID(t, h) != svc {
		t.Fatal("the service was restarted")
	}

	// A service restart runs the stable path: the launcher of 2.1.0, which
	// runs host 2.1.0; the service is adopted, not restarted.
	h.signal(syscall.SIGTERM)
	h.binary = stable
	h.start("--trial-deadline", "30s")
	waitFor(t, 30*time.Second, "the restarted launcher's host", func() bool {
		l := readLauncher(t, h)
		return l.HostPID > 0 && !exitedEarly(l.HostPID) && parentPID(l.HostPID) == h.cmd.Process.Pid
	})
	if got := exeOf(t, h.cmd.Process.Pid); got != filepath.Join(h.State, "versions", "2.1.0", "mesh-host") {
		t.Fatalf("the restarted service runs %s", got)
	}
	// 2.1.0 is kept and not yet proven, and said at its trial that it got
	// through its start: its launcher waits for it to say so at this start
	// too, and stops a host that does not (a release that hangs there).
	pid := readLauncher(t, h).HostPID
	waitFor(t, 30*time.Second, "the restarted host saying it got through its start", func() bool {
		return strings.Contains(h.log.String(), `msg="the host got through its start" pid=`+strconv.Itoa(pid))
	})
	c.setVars("m1", map[string]string{"port": port, "note": "restarted"})
	c.waitApplied("m1", 30*time.Second)
	if c.hostVersion("m1") != "2.1.0" || svcPID(t, h) != svc || copies(port) != 1 {
		t.Fatalf("after a restart: host %s, service pid %d (was %d)", c.hostVersion("m1"), svcPID(t, h), svc)
	}
}

func parentPID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, _ := strconv.Atoi(f[1])
	return n
}
