package realnode

import (
	. "github.com/onsi/ginkgo/v2"
)

// One ordered story, as a platform team lives it: install, use, lose a pod, roll back and upgrade, uninstall.
var _ = Describe("The operator on a real node", Ordered, func() {
	It("installs with helm as docs/operating.md says: two replicas Ready through their real probes, one leader", installAsDocumented)
	It("runs as user 65532 on a read-only root filesystem, with no shell, as the chart says", runsRestricted)
	It("serves its metrics over HTTPS only to an identity allowed /metrics, as docs/operating.md shows", servesMetricsSecurely)
	It("tears down a ConfigMap and an object of a custom kind through the in-cluster operator", tearsDownThroughPods)
	It("runs job steps as real containers: a success, exit code 3 with its last log line, a retry, a timeout that kills the container", runsJobSteps)
	It("hands a teardown in flight to the standby when the leader's pod is deleted, repeating no recorded step", failsOver)
	It("takes teardowns in flight through a helm upgrade to the previous release and back, each step once, nothing released early", upgradesInFlight)
	It("uninstalls as docs/operating.md says: the hook's drain runs in its container, releases every finalizer, and the release and its namespace go", uninstallAsDocumented)
})
