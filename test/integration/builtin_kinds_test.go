package integration

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/discovery"

	clidiscovery "github.com/teardown-dev/teardown-operator/cli/discovery"
)

var _ = Describe("The built-in kinds lint knows without a cluster", func() {
	It("are the kinds the API server serves on its own (else: make builtin-kinds)", func() {
		ctx := context.Background()
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
		version, err := dc.ServerVersion()
		Expect(err).NotTo(HaveOccurred())
		_, lists, err := dc.ServerGroupsAndResources()
		Expect(err).NotTo(HaveOccurred())
		// The suite installs CRDs (the operator's, the samples'): theirs are no built-in kinds.
		var crds apiextensionsv1.CustomResourceDefinitionList
		Expect(k8s.List(ctx, &crds)).To(Succeed())
		custom := map[string]bool{}
		for _, c := range crds.Items {
			custom[c.Spec.Group] = true
		}
		served := clidiscovery.TableOf(version.GitVersion, lists, func(group string) bool { return custom[group] })
		Expect(clidiscovery.Builtin()).To(Equal(served), "cli/discovery/%s differs from discovery: run make builtin-kinds", clidiscovery.BuiltinFile)
	})
})
