// Command kubectl-teardown is the kubectl plugin of teardown-operator: `kubectl teardown`.
package main

import (
	"os"

	"github.com/teardown-dev/teardown-operator/cli"

	_ "golang.org/x/crypto/x509roots/fallback" // CA roots for https when the system has none (the scratch image)
)

func main() {
	os.Exit(cli.Main())
}
