package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestReportUpdates(t *testing.T) {
	m := &Machine{ID: 1, Generation: 5, FinishedGen: 4, AppliedGeneration: 4}
	for _, tc := range []struct {
		name string
		r    Report
		tied bool
		want map[string]any // keys that must be set, with values; nil value: must be absent
	}{
		{"AppliedTiedMovesBoth", Report{Generation: 5, Outcome: OutcomeApplied}, true,
			map[string]any{"applied_generation": int64(5), "finished_generation": int64(5), "last_outcome": OutcomeApplied}},
		{"AppliedUntiedMovesNothing", Report{Generation: 1000, Outcome: OutcomeApplied}, false,
			map[string]any{"applied_generation": nil, "finished_generation": nil, "last_outcome": nil}},
		{"RolledBackUntiedSaysSo", Report{Outcome: OutcomeRolledBack, Reason: "trial failed"}, false,
			map[string]any{"last_outcome": OutcomeRolledBack, "finished_generation": nil}},
		{"UpgradedUntiedSaysNothing", Report{Outcome: OutcomeUpgraded}, false,
			map[string]any{"last_outcome": nil}},
		{"StaleRefusalKeepsSummary", Report{Generation: 3, Outcome: OutcomeRefused}, true,
			map[string]any{"last_outcome": nil, "finished_generation": nil}},
		{"FailedIsNotFinished", Report{Generation: 5, Outcome: OutcomeFailed}, true,
			map[string]any{"last_outcome": OutcomeFailed, "finished_generation": nil, "applied_generation": nil}},
		{"RenewedMovesNothing", Report{Generation: 4, Outcome: OutcomeRenewed, HostVersion: "1.1.0"}, true,
			map[string]any{"last_outcome": nil, "finished_generation": nil, "applied_generation": nil, "host_version": "1.1.0"}},
		{"UnhealthyApplyRecorded", Report{Generation: 5, Outcome: OutcomeApplied, Checks: []CheckResult{{OK: false}}}, true,
			map[string]any{"health": HealthFailing}},
		{"AppliedSaysWhatRuns", Report{Generation: 5, Outcome: OutcomeApplied, Running: map[string]RunningBuild{"web": {Build: 2}}}, true,
			map[string]any{"running": `{"web":{"build":2}}`}},
		// A host leaves out what it runs when that is nothing: the last
		// module taken away showed as still running, everywhere.
		{"AppliedNothingRunsNothing", Report{Generation: 5, Outcome: OutcomeApplied}, true,
			map[string]any{"running": "{}"}},
		{"FailedKeepsWhatRan", Report{Generation: 5, Outcome: OutcomeFailed}, true,
			map[string]any{"running": nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := ReportUpdates(m, &tc.r, tc.tied, time.Now())
			for k, want := range tc.want {
				got, ok := up[k]
				if want == nil {
					if ok {
						t.Errorf("%s set to %v", k, got)
					}
					continue
				}
				if got != want {
					t.Errorf("%s = %v, want %v", k, got, want)
				}
			}
		})
	}
}

func TestCheckReportSend(t *testing.T) {
	send := &Send{ID: "s1", MachineID: 1, Generation: 3}
	for _, tc := range []struct {
		name    string
		machine int64
		gen     int64
		want    error
	}{
		{"OK", 1, 3, nil},
		{"AnotherMachine", 2, 3, ErrForbidden},
		{"WrongGeneration", 1, 4, ErrConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckReportSend(tc.machine, &Report{Send: "s1", Generation: tc.gen}, send)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
		})
	}
}

func TestDecodeReport(t *testing.T) {
	for _, tc := range []struct {
		name, body, field string
	}{
		{"OK", `{"send":"s","generation":0,"outcome":"refused","x-new":1}`, ""},
		{"NoGeneration", `{"send":"s","outcome":"applied"}`, "generation"},
		{"NullGeneration", `{"generation":null,"outcome":"applied"}`, "generation"},
		{"Negative", `{"generation":-1,"outcome":"applied"}`, "generation"},
		{"UnknownOutcome", `{"generation":1,"outcome":"fine"}`, "outcome"},
		{"NotJSON", `{`, "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeReport([]byte(tc.body))
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

func TestInstance_Observed(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name, state string
		silent      time.Duration
		want        string
	}{
		{"ServingWithHeartbeats", InstanceServing, 20 * time.Second, InstanceServing},
		{"ServingSilent", InstanceServing, 2 * time.Minute, InstanceUnresponsive},
		{"StartingSilent", InstanceStarting, 2 * time.Minute, InstanceUnresponsive},
		{"DrainingSilent", InstanceDraining, 2 * time.Minute, InstanceUnresponsive},
		{"StoppedStaysStopped", InstanceStopped, time.Hour, InstanceStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := Instance{State: tc.state, HeartbeatAt: now.Add(-tc.silent)}
			if got := i.Observed(now).State; got != tc.want {
				t.Fatalf("%s silent %v: %s, want %s", tc.state, tc.silent, got, tc.want)
			}
		})
	}
}

// TestReport_HostWordsBounded: what a host says of itself reaches every
// page and terminal that shows its machine: a version with a control
// character (or longer than a version) is refused, and a reason or a
// failing check's detail is kept on the machine clipped with control
// characters escaped; a failing check dated in the future fails from now
// (else it never failed long enough to be unhealthy).
func TestReport_HostWordsBounded(t *testing.T) {
	for _, v := range []string{"1.4.2\x1b[8m", strings.Repeat("9", MaxVersionLen+1)} {
		body, _ := json.Marshal(map[string]any{"generation": 1, "outcome": "applied", "host_version": v})
		if _, err := DecodeReport(body); !errors.Is(err, ErrInvalid) {
			t.Errorf("host_version %q: %v, want invalid", v, err)
		}
	}
	now := time.Now()
	m := &Machine{FinishedGen: 1, AppliedGeneration: 1}
	body, _ := json.Marshal(&Report{Generation: 2, Outcome: OutcomeApplied, Reason: "ok\x1b]52;c;eA==\x07" + strings.Repeat("r", 1<<20),
		Checks: []CheckResult{{Resource: "web.check", At: now.Add(time.Hour), Detail: strings.Repeat("d", 1<<20)}}})
	r, err := DecodeReport(body) // the way every report comes in
	if err != nil {
		t.Fatal(err)
	}
	up := ReportUpdates(m, r, true, now)
	for _, k := range []string{"last_reason", "health_detail"} {
		s := up[k].(string)
		if len(s) > MaxReasonBytes+4 || strings.ContainsAny(s, "\x1b\x07") {
			t.Errorf("%s kept as %d bytes (%q…)", k, len(s), s[:20])
		}
	}
	if since := up["health_since"].(time.Time); since.After(now) {
		t.Errorf("failing since %v, after now %v", since, now)
	}
}

// TestHealthOf_FailingSinceWithinWhatWasHeard: a failing check's "since" is
// the host's time of the look only after the controller's last word of the
// machine's health: a host whose clock is an hour behind does not make a
// check that just failed unhealthy at once, past its grace.
func TestHealthOf_FailingSinceWithinWhatWasHeard(t *testing.T) {
	now := time.Now()
	heard := now.Add(-time.Minute)
	for _, tc := range []struct {
		name string
		at   time.Time
		m    Machine
		want time.Time
	}{
		{"ClockBehind", now.Add(-time.Hour), Machine{Health: HealthPassing, HealthAt: &heard}, now},
		{"NothingHeardBefore", now.Add(-time.Hour), Machine{}, now},
		{"ClockAhead", now.Add(time.Hour), Machine{Health: HealthPassing, HealthAt: &heard}, now},
		{"SinceTheLastWord", now.Add(-30 * time.Second), Machine{Health: HealthPassing, HealthAt: &heard}, now.Add(-30 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, since, _ := HealthOf(&tc.m, []CheckResult{{Resource: "web.check", At: tc.at}}, now)
			if !since.Equal(tc.want) {
				t.Fatalf("failing since %s, want %s", since, tc.want)
			}
			if tc.name == "ClockBehind" && DefaultStateRules.Unhealthy(&Machine{Health: HealthFailing, HealthSince: &since}, now) {
				t.Fatal("unhealthy at once, past the grace")
			}
		})
	}
}

// TestDecodeReport_RunningBounded: what a report says its host runs is kept
// on the machine and carried by every list of machines: at most MaxRunning
// modules, each a module's name (a report naming 9,000 made every page of
// machines a megabyte). The rest is dropped, the report kept: refused, it
// would leave its host's outbox for good.
func TestDecodeReport_RunningBounded(t *testing.T) {
	many := map[string]RunningBuild{"web": {Build: 3}, "<img src=x>": {Build: 1}, "Web": {Build: 1}}
	for i := range MaxRunning + 1 {
		many[fmt.Sprintf("m%04d", i)] = RunningBuild{Build: 1}
	}
	body, _ := json.Marshal(&Report{Generation: 1, Outcome: OutcomeApplied, Running: many})
	r, err := DecodeReport(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Running) != MaxRunning || r.Running["m0000"].Build != 1 {
		t.Fatalf("%d modules kept", len(r.Running))
	}
	for mod := range r.Running {
		if ValidName("running", mod) != nil {
			t.Fatalf("kept %q", mod)
		}
	}
	body, _ = json.Marshal(&Report{Generation: 1, Outcome: OutcomeApplied, Running: map[string]RunningBuild{"web": {Build: 3}}})
	if r, err := DecodeReport(body); err != nil || r.Running["web"].Build != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	// A digest that is not one is dropped, its build kept: a megabyte of
	// one made every list of machines a megabyte.
	good := "sha256:" + strings.Repeat("ab", 32)
	body, _ = json.Marshal(&Report{Generation: 1, Outcome: OutcomeApplied, Running: map[string]RunningBuild{
		"web": {Build: 3, Digest: "sha256:" + strings.Repeat("A", 900<<10)}, "db": {Build: 2, Digest: good}, "x": {Build: -4}}})
	r, err = DecodeReport(body)
	if err != nil || r.Running["web"] != (RunningBuild{Build: 3}) || r.Running["db"] != (RunningBuild{Build: 2, Digest: good}) || r.Running["x"] != (RunningBuild{}) {
		t.Fatalf("%+v %v", r.Running, err)
	}
}

// TestHealthOf_FailingKeptBounded: a report may carry any number of
// failing checks (a host's words): the machine keeps the "since" of the
// MaxFailingKept failing longest, the one shown among them.
func TestHealthOf_FailingKeptBounded(t *testing.T) {
	now := time.Now().UTC()
	old := now.Add(-time.Hour)
	m := &Machine{Health: HealthFailing, HealthCheck: "old.svc", HealthSince: &old, HealthAt: &old}
	checks := []CheckResult{}
	for i := range 1000 {
		checks = append(checks, CheckResult{Resource: fmt.Sprintf("c%04d.svc", i), Detail: "down"})
	}
	checks = append(checks, CheckResult{Resource: "old.svc", Detail: "down"})
	h, check, _, since, failing := HealthOf(m, checks, now)
	var f failingChecks
	if err := json.Unmarshal([]byte(failing), &f); err != nil {
		t.Fatal(err)
	}
	kept := f.Since
	if h != HealthFailing || check != "old.svc" || !since.Equal(old) || len(kept) != MaxFailingKept || !kept["old.svc"].Equal(old) {
		t.Fatalf("1001 failing checks: %s %s since %v, %d kept (%v)", h, check, since, len(kept), kept["old.svc"])
	}
}
