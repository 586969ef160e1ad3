package agent

import "testing"

// TestHostUnit_TwoCharacterLineEndsAreOneEnd: systemd's read_line takes
// "\n\r", "\n\0" and "\r\0" as ONE line end (fileio.c read_line_full), so
// "ExecStart=\\" + "\n\r" + "/usr/bin/sleep infinity" is, to systemd, the
// continued line "ExecStart= /usr/bin/sleep infinity", and
// "Description=x \\" + "\n\r" + "ExecStart=<stable> launch" is one
// Description value. Read as two line ends (an empty line between), the
// continuation ended: the guard read a reset, then ExecStart=<stable>
// launch last, and passed a unit whose one ExecStart to systemd is
// /usr/bin/sleep infinity. Such a unit is refused.
func TestHostUnit_TwoCharacterLineEndsAreOneEnd(t *testing.T) {
	state := t.TempDir()
	stable := StablePath(state)
	for _, eol := range []string{"\n\r", "\n\x00", "\r\x00"} {
		content := "[Service]\nExecStart=\\" + eol + "/usr/bin/sleep infinity\n" +
			"Description=x \\" + eol + "ExecStart=" + stable + " launch --state " + state + "\n"
		if err := checkHostUnit(unitDecl("host.unit", "/etc/systemd/system/mesh-host.service", content), state); err == nil {
			t.Errorf("eol %q: a unit systemd reads as ExecStart= /usr/bin/sleep infinity (the stable ExecStart inside Description) passed checkHostUnit: %q", eol, content)
		}
	}
}
