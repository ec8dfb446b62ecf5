// Command coder is the whole product in one binary: the control plane
// (coder server), provisioner daemons, the workspace agent, bundle and
// appliance tooling, and the user CLI.
package main

import (
	"os"

	"airgapcoder/cli"
	"airgapcoder/postgres"
)

func main() {
	postgres.RunHelperIfRequested()
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
