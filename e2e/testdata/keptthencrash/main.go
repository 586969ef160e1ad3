// Command keptthencrash is a host release for the upgrade test that wins
// its trial and then dies at every start: on trial, and as a launcher or
// for `version`, it is the real host build it names (real, set at build
// time); run as a host off trial — started again by its launcher after it
// was kept — it exits at once, as a release that breaks at its next
// start would.
package main

import (
	"fmt"
	"os"
	"syscall"

	"mesh/agent"
)

// real is the host build this one stands for (-X main.real=PATH).
var real string

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run" && os.Getenv(agent.EnvTrialVersion) == "" {
		fmt.Fprintln(os.Stderr, "keptthencrash: broken on purpose, now that it was kept")
		os.Exit(1)
	}
	err := syscall.Exec(real, append([]string{real}, os.Args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "keptthencrash:", err)
	os.Exit(2)
}
