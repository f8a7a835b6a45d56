package realnode

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/teardown-dev/teardown-operator/test/framework"
)

func servesMetricsSecurely(ctx SpecContext) {
	cmds := docBlock("### Reading the metrics", 1)
	Expect(cmds).To(HaveLen(4))
	Expect(cmds[2]).To(HaveSuffix("&"))
	for _, cmd := range cmds[:2] {
		By("running: " + cmd)
		out, err := shell(ctx, cmd)
		Expect(err).NotTo(HaveOccurred(), out)
	}
	By("running in the background: " + cmds[2])
	pf := shellCommand(context.Background(), "exec "+strings.TrimSuffix(cmds[2], "&"))
	var pfOut framework.SyncBuffer
	pf.Stdout, pf.Stderr = &pfOut, &pfOut
	Expect(pf.Start()).To(Succeed())
	DeferCleanup(func() { _ = pf.Process.Kill(); _ = pf.Wait() })
	Eventually(pfOut.String, 20*time.Second).Should(ContainSubstring("Forwarding from 127.0.0.1:8443"))

	By("running: " + cmds[3])
	out, err := shell(ctx, cmds[3])
	Expect(err).NotTo(HaveOccurred(), out)
	Expect(out).To(ContainSubstring("# TYPE go_goroutines gauge"), "the metrics, over HTTPS, to a bound identity (of either replica)")

	By("no token: 401; a token of an identity not allowed /metrics: 403")
	code := func(header string) string {
		out, err := shell(ctx, `curl -sk -o /dev/null -w '%{http_code}' `+header+` https://127.0.0.1:8443/metrics`)
		Expect(err).NotTo(HaveOccurred(), out)
		return out
	}
	Expect(code("")).To(Equal("401"))
	Expect(code(`-H "Authorization: Bearer $(kubectl create token default -n teardown-system)"`)).To(Equal("403"))
	out, err = shell(ctx, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8443/metrics")
	Expect(err).NotTo(HaveOccurred(), out)
	Expect(out).To(Equal("400"), "no plain HTTP")
}
