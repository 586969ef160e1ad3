package models

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTailLines(t *testing.T) {
	five := []string{"1", "2", "3", "4", "5"}
	for _, tc := range []struct {
		name string
		n    int
		want string
		cut  bool
	}{
		{"Fewer", 3, "3 4 5", true},
		{"Exactly", 5, "1 2 3 4 5", false},
		{"More", 100, "1 2 3 4 5", false},
		{"ZeroIsAll", 0, "1 2 3 4 5", false},
		{"One", 1, "5", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cut := TailLines(five, tc.n)
			if strings.Join(got, " ") != tc.want || cut != tc.cut {
				t.Fatalf("TailLines(5 lines, %d) = %q, %v", tc.n, got, cut)
			}
		})
	}
}

func TestParseTail(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"", MaxLogLines, true}, {"1", 1, true}, {"100", 100, true},
		{"0", 0, false}, {"101", 0, false}, {"-3", 0, false}, {"ten", 0, false}, {"10 ", 0, false}, {"1e2", 0, false},
	} {
		n, err := ParseTail(tc.in)
		var inv *InvalidError
		switch {
		case tc.ok && (err != nil || n != tc.want):
			t.Errorf("ParseTail(%q) = %d, %v; want %d", tc.in, n, err, tc.want)
		case !tc.ok && (!errors.As(err, &inv) || inv.Field != "tail"):
			t.Errorf("ParseTail(%q) = %d, %v; want a refusal of tail", tc.in, n, err)
		}
	}
}

func TestServiceLogRow_View(t *testing.T) {
	r := ServiceLogRow{Resource: "m.s", Why: LogRestarted, Lines: "a\nb\nc"}
	if v := r.View(2); strings.Join(v.Lines, ",") != "b,c" || !v.Truncated {
		t.Fatalf("tail 2: %+v", v)
	}
	if v := r.View(100); len(v.Lines) != 3 || v.Truncated {
		t.Fatalf("tail 100: %+v", v)
	}
	if v := (&ServiceLogRow{}).View(10); v.Lines != nil {
		t.Fatalf("no lines: %+v", v)
	}
}

func TestValidateLogs(t *testing.T) {
	many := func(n int, line string) []string {
		ls := make([]string, n)
		for i := range ls {
			ls[i] = line
		}
		return ls
	}
	ok := ServiceLog{Resource: "node-tools.service", Why: LogRestarted, Lines: []string{"listen: address in use", "\tat main"}}
	services := make([]ServiceLog, MaxLogServices+1)
	for i := range services {
		services[i] = ok
		services[i].Resource = "m.s" + string(rune('a'+i))
	}
	for _, tc := range []struct {
		name  string
		logs  []ServiceLog
		field string
	}{
		{"OK", []ServiceLog{ok}, ""},
		{"None", nil, ""},
		{"AtTheBounds", []ServiceLog{{Resource: "m.s", Why: LogFailed, Lines: many(MaxLogLines, strings.Repeat("x", MaxLogBytes/MaxLogLines-1))}}, ""},
		{"TooManyServices", services, "logs"},
		{"TooManyLines", []ServiceLog{{Resource: "m.s", Why: LogFailed, Lines: many(MaxLogLines+1, "x")}}, "logs[0].lines"},
		{"TooManyBytes", []ServiceLog{{Resource: "m.s", Why: LogFailed, Lines: []string{strings.Repeat("x", MaxLogBytes)}}}, "logs[0].lines"},
		{"NotAResource", []ServiceLog{{Resource: "../etc", Why: LogFailed}}, "logs[0].resource"},
		{"NoModule", []ServiceLog{{Resource: "service", Why: LogFailed}}, "logs[0].resource"},
		{"Twice", []ServiceLog{ok, ok}, "logs[1].resource"},
		{"UnknownWhy", []ServiceLog{{Resource: "m.s", Why: "bored"}}, "logs[0].why"},
		{"Newline", []ServiceLog{{Resource: "m.s", Why: LogFailed, Lines: []string{"a\nb"}}}, "logs[0].lines[0]"},
		{"TerminalEscape", []ServiceLog{{Resource: "m.s", Why: LogFailed, Lines: []string{"ok", "\x1b[2J"}}}, "logs[0].lines[1]"},
		{"NUL", []ServiceLog{{Resource: "m.s", Why: LogFailed, Lines: []string{"a\x00"}}}, "logs[0].lines[0]"},
		{"C1", []ServiceLog{{Resource: "m.s", Why: LogFailed, Lines: []string{"a\u009b"}}}, "logs[0].lines[0]"},
		{"InvalidUTF8", []ServiceLog{{Resource: "m.s", Why: LogFailed, Lines: []string{"a\xff"}}}, "logs[0].lines[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateLogs(tc.logs)
			var inv *InvalidError
			switch {
			case tc.field == "" && err != nil:
				t.Fatal(err)
			case tc.field != "" && (!errors.As(err, &inv) || inv.Field != tc.field):
				t.Fatalf("%v, want a refusal of %s", err, tc.field)
			}
		})
	}
}

func TestEscapeLogLine(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		limit          int
	}{
		{"Plain", "listening on :9000", "listening on :9000", 100},
		{"Tab", "a\tb", "a\tb", 100},
		{"Escape", "\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`, 100},
		{"NUL", "a\x00b", `a\x00b`, 100},
		{"CR", "progress\r", `progress\x0d`, 100},
		{"C1", "a\u0085b", `a\x85b`, 100},
		{"InvalidUTF8", "a\xffb", `a\xffb`, 100},
		{"Unicode", "héllo ✓", "héllo ✓", 100},
		{"Cut", strings.Repeat("x", 50), strings.Repeat("x", 7) + "…", 10},
		{"CutOnARune", "ééééé", "éé…", 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := EscapeLogLine(tc.in, tc.limit)
			if got != tc.want {
				t.Fatalf("EscapeLogLine(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
			}
			if err := ValidateLogs([]ServiceLog{{Resource: "m.s", Why: LogFailed, Lines: []string{got}}}); err != nil || !utf8.ValidString(got) {
				t.Fatalf("its output is refused: %v", err)
			}
		})
	}
}
