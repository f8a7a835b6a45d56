// Command pause is the sandbox ("pause") container of the local real node: it holds the pod's
// namespaces, reaps the children it inherits as PID 1 of a shared PID namespace, and exits on
// SIGTERM or SIGINT. Kubernetes' own pause is C and is pulled from a registry; the local node has
// neither a registry nor a C toolchain in its image, so this static Go program stands in for it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
