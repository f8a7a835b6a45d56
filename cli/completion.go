package cli

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// Completion of arguments, for kubectl_complete-teardown (kubectl's plugin completion) and the
// scripts of kubectl-teardown completion: run names, the kinds policies target, the objects of
// those kinds, and policies.

// completeTargets completes KIND/NAME: the kinds policies target, each once, then the objects of
// the kind typed, in any form kubectl takes (configmap, cm, kafkatopics.kafka.strimzi.io).
func (r *root) completeTargets(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 || r.kube.connect() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx := cmd.Context()
	kinds, err := r.targetKinds(cmd)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	kind, prefix, typedKind := strings.Cut(toComplete, "/")
	var out []string
	if !typedKind {
		for _, gk := range kinds {
			out = append(out, kindArgOf(gk)+"/")
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
	// The kind as kubectl maps it; the name is a placeholder, nothing is read by it.
	f, err := r.kube.resolveFollowed(kind + "/-")
	if err != nil || !slices.Contains(kinds, f.gvk.GroupKind()) {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(f.gvk.GroupVersion().WithKind(f.gvk.Kind + "List"))
	var opts []client.ListOption
	if f.namespace != "" {
		opts = append(opts, client.InNamespace(f.namespace))
	}
	if err := r.kube.client.List(ctx, list, opts...); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	for _, it := range list.Items {
		if strings.HasPrefix(it.Name, prefix) {
			out = append(out, kind+"/"+it.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// targetKinds are the kinds the policies the user sees target (TeardownPolicies of the
// namespace, ClusterTeardownPolicies), each once, sorted.
func (r *root) targetKinds(cmd *cobra.Command) ([]schema.GroupKind, error) {
	views, err := r.kube.policies(cmd.Context(), r.kube.namespace())
	if err != nil {
		return nil, err
	}
	var kinds []schema.GroupKind
	for _, v := range views {
		gv, err := schema.ParseGroupVersion(v.Spec.TargetRef.APIVersion)
		if err == nil {
			kinds = append(kinds, gv.WithKind(v.Spec.TargetRef.Kind).GroupKind())
		}
	}
	slices.SortFunc(kinds, func(a, b schema.GroupKind) int { return strings.Compare(kindArgOf(a), kindArgOf(b)) })
	return slices.Compact(kinds), nil
}

// kindArgOf names a kind as kubectl takes it: configmap, kafkatopic.kafka.strimzi.io (the
// group keeps two groups' kinds of one name apart).
func kindArgOf(gk schema.GroupKind) string {
	if gk.Group == "" {
		return strings.ToLower(gk.Kind)
	}
	return strings.ToLower(gk.Kind) + "." + gk.Group
}

// completeRuns completes run names in the namespace, and KIND/NAME once a "/" is typed.
func (r *root) completeRuns(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 || r.kube.connect() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	if strings.Contains(toComplete, "/") {
		return r.completeTargets(cmd, args, toComplete)
	}
	var runs v1alpha1.TeardownRunList
	if err := r.kube.client.List(cmd.Context(), &runs, client.InNamespace(r.kube.namespace())); err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var out []string
	for _, run := range runs.Items {
		if strings.HasPrefix(run.Name, toComplete) {
			out = append(out, run.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completePolicies completes a policy as --policy takes it: TeardownPolicy/NAME (of the
// namespace), ClusterTeardownPolicy/NAME.
func (r *root) completePolicies(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if r.kube.connect() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	views, err := r.kube.policies(cmd.Context(), r.kube.namespace())
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var out []string
	for _, v := range views {
		if s := v.Key.Kind + "/" + v.Key.Name; strings.HasPrefix(s, toComplete) {
			out = append(out, s)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
