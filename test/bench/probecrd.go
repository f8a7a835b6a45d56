package main

import (
	"context"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The probe is the smallest useful custom resource: a namespaced kind whose spec holds one string.
// What creating one costs is the floor of any record kept as a custom resource.
const (
	probeGroup  = "bench.teardown.dev"
	probePlural = "probes"
)

// installProbeCRD installs the probe's CRD and waits until the API server serves it.
func installProbeCRD(ctx context.Context, c client.Client) error {
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: probePlural + "." + probeGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: probeGroup, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: probePlural, Singular: "probe", Kind: "Probe", ListKind: "ProbeList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"value": {Type: "string"}}},
					},
				}},
			}},
		},
	}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, crd)); err != nil {
		return err
	}
	return waitFor(ctx, time.Minute, func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
			return false, err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// probe is the i-th probe object in namespace ns, its value as long as a target's name.
func probe(ns string, i int) client.Object {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"value": name(i)}}}
	u.SetAPIVersion(probeGroup + "/v1")
	u.SetKind("Probe")
	u.SetNamespace(ns)
	u.SetName(name(i))
	return u
}
