// Command exitatstart is a broken host release for the upgrade test: it
// exits at start.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "exitatstart: broken on purpose")
	os.Exit(1)
}
