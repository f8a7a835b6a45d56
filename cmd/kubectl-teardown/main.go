// Command kubectl-teardown is the kubectl plugin of teardown-operator: `kubectl teardown`.
package main

import (
	"os"

	"github.com/teardown-dev/teardown-operator/cli"
)

func main() {
	os.Exit(cli.Main())
}
