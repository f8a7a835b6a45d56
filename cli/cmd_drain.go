package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

type drainOptions struct {
	policy string
	all    bool
	dryRun bool
	yes    bool
	// stopOperator is the operator's Deployment to stop before draining (--stop-operator), when set.
	stopOperator *operatorRef
	timeout      time.Duration
	// ignoreRunningOperator drains although a replica holds the operator's lease.
	ignoreRunningOperator bool
	// resolved is the policy --policy names, once found (it may be gone).
	resolved *policy.Key
}

func (r *root) drainCommand() *cobra.Command {
	o := &drainOptions{}
	cmd := &cobra.Command{
		Use:   "drain (--policy POLICY | --all) [--stop-operator NAMESPACE/NAME] [--dry-run]",
		Short: "Release every teardown finalizer, without running pipelines",
		Long: `Removes teardown finalizers from every object that carries them, running no pipeline, and prints
what it released: an object being deleted is deleted at once. For uninstalling the operator, and
for the day the operator is gone and objects are stuck. Stop the operator first (--stop-operator
does): a running operator puts its finalizers back on the objects its policies still select (to
stop protecting objects while it runs, suspend or delete the policy instead).

Before it releases anything, drain deletes the MutatingAdmissionPolicies (and their bindings) the
operator made to arm objects at creation (with --policy, that policy's): left in place, they would
put finalizers on new objects that nothing removes. A running operator makes them again. It needs
list and delete on mutatingadmissionpolicies and mutatingadmissionpolicybindings.

--policy drains one policy's finalizer: TeardownPolicy/NAME (in -n's namespace),
ClusterTeardownPolicy/NAME, or NAME when only one policy has it; a policy being deleted also loses
its own finalizer (teardown.dev/release-targets), so that it goes. --all drains every policy's
finalizer, and the operator's own finalizers on TeardownRuns and policies, so that they and the
CRDs can be deleted. On a terminal --all shows what it would release and asks; where it cannot ask
(standard input is not a terminal) it refuses without --yes. Running it again finds nothing to do.

While a replica of the operator holds its leader election lease (read in --run-namespace), drain
refuses to release what the operator would put back (--all, or a policy that is neither suspended
nor being deleted): stop the operator first (--stop-operator), or pass --ignore-running-operator.
With --dry-run it only warns.

--stop-operator NAMESPACE/NAME stops the operator before draining: it scales that Deployment to 0
replicas (through its scale subresource) and waits, up to --timeout, until none of its pods remain
(pods of Jobs that share its labels, such as an uninstall hook's, do not count); on a timeout it
drains nothing. The Helm chart's uninstall hook runs drain so, and so can one uninstalling by hand.
The operator stays at 0 replicas afterwards: bring it back with kubectl scale or helm upgrade. It
needs get on deployments, patch on deployments/scale and list on pods in that namespace. With
--dry-run it only says what it would stop; at 0 replicas already, there is nothing to stop.`,
		Example: `  kubectl teardown drain --all --dry-run
  kubectl teardown drain --all --yes
  kubectl teardown drain --all --yes --stop-operator teardown-system/teardown-operator
  kubectl teardown drain --policy TeardownPolicy/database-dump-job -n shop`,
		Args: exactArgs(0, "no arguments (name the policy with --policy)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.all == (o.policy != "") {
				return usageError("drain needs exactly one of --policy POLICY or --all")
			}
			if err := o.parseStop(cmd); err != nil {
				return err
			}
			if o.all && !o.yes && !o.dryRun && !isTerminal(r.streams.In) {
				return usageError("drain --all releases every object the operator protects and cannot ask here (standard input is not a terminal): add --yes to confirm, or --dry-run to see what it would release")
			}
			if err := r.kube.connect(); err != nil {
				return err
			}
			return r.drain(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.policy, "policy", "", "drain this policy's finalizer only")
	cmd.Flags().BoolVar(&o.all, "all", false, "drain every teardown finalizer")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "print what would be released, releasing nothing")
	cmd.Flags().BoolVar(&o.yes, "yes", false, "confirm --all without being asked (required where drain cannot ask: no terminal)")
	cmd.Flags().BoolVar(&o.ignoreRunningOperator, "ignore-running-operator", false, "drain although a replica of the operator holds its lease (it puts finalizers back)")
	cmd.Flags().String("stop-operator", "", "scale the operator's Deployment, `NAMESPACE/NAME`, to 0 and wait for its pods to go before draining")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long --stop-operator waits for the operator's pods to go")
	return cmd
}

// parseStop reads --stop-operator and --timeout.
func (o *drainOptions) parseStop(cmd *cobra.Command) error {
	if o.timeout <= 0 {
		return usageError("--timeout %s: give a positive duration, for example 2m", o.timeout)
	}
	if !cmd.Flags().Changed("stop-operator") {
		return nil
	}
	arg, _ := cmd.Flags().GetString("stop-operator")
	ref, err := parseOperatorRef(arg)
	if err != nil {
		return err
	}
	o.stopOperator = &ref
	return nil
}

// isTerminal reports whether in is a terminal, where drain can ask.
func isTerminal(in any) bool {
	f, ok := in.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// drained says whether a finalizer on an object in namespace ns is to be released.
type drained func(finalizer, ns string) bool

func (r *root) drain(ctx context.Context, o *drainOptions) error {
	match, kinds, view, err := r.drainScope(ctx, o)
	if err != nil {
		return err
	}
	if err := r.checkOperatorStopped(ctx, o, view); err != nil {
		return err
	}
	d := &drainer{kube: r.kube, out: r.streams.Out, errOut: r.streams.ErrOut, match: match, dryRun: o.dryRun, liftGuards: o.all}
	if kinds == nil {
		if kinds, err = d.allKinds(); err != nil {
			return err
		}
	}
	if o.all && !o.yes && !o.dryRun {
		// On a terminal (checked before): show what would go, and ask.
		preview := *d
		preview.dryRun = true
		if err := preview.drainKinds(ctx, kinds); err != nil {
			return err
		}
		r.printDrained(&preview)
		if ok, err := r.confirmAll(&preview); !ok || err != nil {
			return err
		}
	}
	// Stopped once what to drain is known, so that a wrong --policy leaves the operator running.
	if o.stopOperator != nil {
		if err := r.stopOperator(ctx, *o.stopOperator, o.dryRun, o.timeout); err != nil {
			return err
		}
	}
	if err := d.removeAdmission(ctx, o.resolved); err != nil {
		return err
	}
	if err := d.drainKinds(ctx, kinds); err != nil {
		return err
	}
	if view != nil && view.Object.GetDeletionTimestamp() != nil {
		if err := d.releasePolicy(ctx, view); err != nil {
			return err
		}
	}
	r.printDrained(d)
	if d.unread != "" {
		// An uninstall must not go on as if everything was drained.
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("some API groups could not be read, and objects of their kinds were not drained: %s", d.unread)}
	}
	return nil
}

// printDrained prints what a drain released, or would.
func (r *root) printDrained(d *drainer) {
	verb := "released"
	if d.dryRun {
		verb = "would release"
	}
	if d.objects == 0 {
		fmt.Fprintln(r.streams.Out, "nothing to drain: no object carries a matching teardown finalizer")
		return
	}
	vetoes := ""
	if d.vetoes > 0 {
		vetoes = fmt.Sprintf(" and %d deletion guard %s", d.vetoes, plural(d.vetoes, "veto", "vetoes"))
	}
	fmt.Fprintf(r.streams.Out, "%s %d %s%s from %d %s\n", verb, d.finalizers, plural(d.finalizers, "finalizer", "finalizers"),
		vetoes, d.objects, plural(d.objects, "object", "objects"))
}

// drainScope returns what to release, where to look (nil: every kind) and, with --policy, the
// policy (nil when it is gone).
func (r *root) drainScope(ctx context.Context, o *drainOptions) (drained, []schema.GroupVersionResource, *policy.View, error) {
	if o.all {
		return func(f, _ string) bool {
			return naming.IsOurs(f) || f == v1alpha1.FinalizerRun || f == v1alpha1.FinalizerPolicy
		}, nil, nil, nil
	}
	key, view, err := r.resolvePolicy(ctx, o.policy)
	if err != nil {
		return nil, nil, nil, err
	}
	o.resolved = &key
	fin := key.Finalizer()
	match := func(f, ns string) bool { return f == fin && (!key.Namespaced() || ns == key.Namespace) }
	if view == nil {
		return match, nil, nil, nil // the policy is gone: its kind is unknown, look everywhere
	}
	gv, err := schema.ParseGroupVersion(view.Spec.TargetRef.APIVersion)
	if err != nil {
		return match, nil, view, nil
	}
	m, err := r.kube.mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: view.Spec.TargetRef.Kind}, gv.Version)
	if err != nil {
		return match, nil, view, nil // not served (its CRD removed?): look everywhere
	}
	return match, []schema.GroupVersionResource{m.Resource}, view, nil
}

// resolvePolicy finds the policy --policy names; view is nil when it no longer exists.
func (r *root) resolvePolicy(ctx context.Context, arg string) (policy.Key, *policy.View, error) {
	kind, name, qualified := strings.Cut(arg, "/")
	if !qualified {
		kind, name = "", arg
	}
	var candidates []policy.Key
	switch strings.ToLower(kind) {
	case "", "teardownpolicy", "teardownpolicies", "tdp":
		candidates = append(candidates, policy.Key{Kind: policy.KindNamespaced, Namespace: r.kube.namespace(), Name: name})
	}
	switch strings.ToLower(kind) {
	case "", "clusterteardownpolicy", "clusterteardownpolicies", "ctdp":
		candidates = append(candidates, policy.Key{Kind: policy.KindCluster, Name: name})
	}
	if len(candidates) == 0 {
		return policy.Key{}, nil, usageError("--policy %q: name it TeardownPolicy/NAME or ClusterTeardownPolicy/NAME", arg)
	}
	var found []policy.Key
	var views []*policy.View
	for _, key := range candidates {
		v, err := r.kube.getPolicy(ctx, key)
		if err != nil {
			return policy.Key{}, nil, err
		}
		if v != nil {
			found, views = append(found, key), append(views, v)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], views[0], nil
	case len(found) > 1:
		return policy.Key{}, nil, usageError("--policy %q: both %s and %s exist; name one with its kind", arg, found[0], found[1])
	case len(candidates) == 1:
		return candidates[0], nil, nil // drain a deleted policy's finalizer
	}
	return policy.Key{}, nil, usageError("--policy %q: no such policy; to drain a deleted policy's finalizer, name it TeardownPolicy/NAME (with -n) or ClusterTeardownPolicy/NAME", arg)
}

// getPolicy reads a policy; nil when it does not exist.
func (k *kube) getPolicy(ctx context.Context, key policy.Key) (*policy.View, error) {
	var obj client.Object = &v1alpha1.ClusterTeardownPolicy{}
	if key.Namespaced() {
		obj = &v1alpha1.TeardownPolicy{}
	}
	if err := k.client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, apiError(err)
	}
	v, err := policy.ViewOf(obj)
	return &v, err
}
