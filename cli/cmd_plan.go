package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/lookup"
	"github.com/teardown-dev/teardown-operator/steps"
)

// planReport is what plan found for one object, as -o yaml|json prints it.
type planReport struct {
	Object   string         `json:"object"`
	Policies []policyReport `json:"policies"`
	// Delete is the API server's verdict on deleting the object (a dry run).
	Delete string `json:"delete"`
	// Note says what the plan could not see (cluster policies the user may not list).
	Note string `json:"note,omitempty"`
	// Operator is what the operator's lease says (plan_deleting.go).
	Operator planOperator `json:"operator"`
	// Deleting is set when the object is already being deleted.
	Deleting *planDeletion `json:"deleting,omitempty"`
	// OtherNamespaces names TeardownPolicies of other namespaces that target the object's kind,
	// when none of its own does (plan_elsewhere.go).
	OtherNamespaces *planElsewhere `json:"otherNamespaces,omitempty"`
}

type policyReport struct {
	Policy    string `json:"policy"`
	Protects  bool   `json:"protects"`
	Why       string `json:"why,omitempty"`
	Finalizer string `json:"finalizer,omitempty"`
	// Trigger is DeleteRequest for a two-phase policy: its pipeline runs before the DELETE.
	Trigger       string     `json:"trigger,omitempty"`
	DeletionGuard *planGuard `json:"deletionGuard,omitempty"`
	// FromCreation says whether objects of the policy are armed when they are created (by its
	// MutatingAdmissionPolicy, even while the operator is down), and why not.
	FromCreation string       `json:"protectedFromCreation,omitempty"`
	Steps        []stepReport `json:"steps,omitempty"`
}

// planGuard is a deletion guard's verdict on the object now.
type planGuard struct {
	Deny    string `json:"deny"`
	Holds   bool   `json:"holds"`
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
}

type stepReport struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Guard   string `json:"when,omitempty"`
	Summary string `json:"plan"`
	Error   string `json:"error,omitempty"`
	// Destination says the operator refuses the request's destination unless it allows it.
	Destination string `json:"destination,omitempty"`
	Rendered    any    `json:"rendered,omitempty"`
	// Access is RBAC's answer for each API call the step makes as its ServiceAccount.
	Access []accessReport `json:"access,omitempty"`
	// needs are those calls, as the step's plan lists them.
	needs []steps.Access
}

func (r *root) planCommand() *cobra.Command {
	var output, file, allowed string
	cmd := &cobra.Command{
		Use:   "plan KIND/NAME | -f POLICY_FILE",
		Short: "Show what deleting an object would run now, without running it",
		Long: `For KIND/NAME: which policies protect the object (and which would but do not, and why), then
for each the pipeline as it would run now: guards evaluated, http requests rendered (Secret values
redacted), Job manifests rendered, wait conditions and lookups evaluated; and the API server's
verdict on deleting it (kubectl delete --dry-run=server). Nothing is sent, created or changed.
It says when no replica of the operator holds its lease, and, for an object already being deleted,
what holds it, its runs, and whether anyone acts on them. When no TeardownPolicy of the object's
namespace targets its kind, it names those of other namespaces that do.

With -f: the objects in the cluster that a policy file would protect, before it is applied.

A TeardownPolicy's http steps may not reach loopback, private, link-local or API server addresses
unless the operator's --http-allowed-destinations allows them: plan renders such requests and says
so; pass the operator's list with --http-allowed-destinations to check against it.`,
		Example: `  kubectl teardown plan manageddatabase/orders -n shop
  kubectl teardown plan -f policies/database-dump-job.yaml -n shop`,
		ValidArgsFunction: r.completeTargets,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "yaml" && output != "json" {
				return usageError("--output %q: must be text, yaml or json", output)
			}
			if err := r.kube.connect(); err != nil {
				return err
			}
			if err := r.kube.setAllowedDestinations(allowed); err != nil {
				return err
			}
			if file != "" {
				if len(args) > 0 {
					return usageError("plan takes KIND/NAME or -f FILE, not both")
				}
				return r.planFile(cmd.Context(), file, output)
			}
			if len(args) != 1 {
				return usageError("plan takes one KIND/NAME (or -f FILE)")
			}
			rep, err := r.plan(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return r.print(rep, output, func(w io.Writer) { printPlan(w, rep) })
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, yaml or json")
	cmd.Flags().StringVarP(&file, "filename", "f", "", "a policy file: list the objects it would protect")
	cmd.Flags().StringVar(&allowed, "http-allowed-destinations", "", "the operator's --http-allowed-destinations, to check http destinations against")
	return cmd
}

// plan builds the report for the object arg names.
func (r *root) plan(ctx context.Context, arg string) (*planReport, error) {
	t, err := r.kube.getTarget(ctx, arg)
	if err != nil {
		return nil, err
	}
	compiler, err := r.kube.liveCompiler()
	if err != nil {
		return nil, err
	}
	views, err := r.kube.policiesFor(ctx, t)
	if err != nil {
		return nil, err
	}
	op := r.kube.operator(ctx)
	rep := &planReport{Object: describeObject(t.GVK.Kind, t.Object), Operator: operatorReport(op),
		Deleting: r.deletion(ctx, arg, t, op), OtherNamespaces: r.kube.policiesElsewhere(ctx, t, views)}
	for _, v := range views {
		rep.Policies = append(rep.Policies, r.planPolicy(ctx, compiler, v, t, op))
	}
	rep.Delete = r.kube.dryRunDelete(ctx, t.Object)
	if r.kube.clusterPoliciesHidden {
		rep.Note = "you may not list ClusterTeardownPolicies: one may protect this object too (its finalizer would be on the object)"
	}
	return rep, nil
}

// notArmedWhy says why a policy that selects an object has not put its finalizer on it yet.
func notArmedWhy(op operatorState) string {
	switch {
	case op.down():
		return fmt.Sprintf("selected, but the finalizer is not on the object: the operator is not running (no replica has held its lease since %s), so nothing arms it; deleted now, it would go without this teardown",
			op.Since.UTC().Format(time.RFC3339))
	case op.Held:
		return "selected, but the finalizer is not on the object yet: the running operator adds it within seconds of a change"
	}
	return "selected, but the finalizer is not on the object yet (is the operator running? " + op.Why + ")"
}

// planPolicy reports one policy that targets the object's kind.
func (r *root) planPolicy(ctx context.Context, compiler *policy.Compiler, v policy.View, t *target, op operatorState) policyReport {
	pr := policyReport{Policy: v.Key.String(), Finalizer: v.Key.Finalizer()}
	if c := readyCondition(v.Status); c != nil && c.Status != "True" {
		pr.Why = fmt.Sprintf("the policy is not Ready (%s: %s)", c.Reason, c.Message)
		return pr
	}
	c, errs := compiler.Compile(v)
	if len(errs) > 0 {
		pr.Why = "the policy does not compile: " + errs.ToAggregate().Error()
		return pr
	}
	if why := r.kube.selectsWhyNot(ctx, c, t.Object); why != "" {
		pr.Why = why
		return pr
	}
	pr.Protects = true
	pr.FromCreation = fromCreation(v, c)
	if !slices.Contains(t.Object.GetFinalizers(), c.Finalizer) {
		pr.Why = notArmedWhy(op)
	}
	if c.Suspended {
		pr.Why = "the policy is suspended: deleting the object would not run this pipeline"
	}
	if c.TwoPhase() {
		pr.Trigger = string(v1alpha1.TriggerDeleteRequest)
	}
	if c.Guard != nil {
		pr.DeletionGuard = r.evaluateGuard(ctx, c, t)
	}
	pr.Steps = planSteps(ctx, c, t, r.kube.runNamespace)
	for i := range pr.Steps {
		pr.Steps[i].Access = r.kube.reviewAccess(ctx, pr.Steps[i].needs)
	}
	if v.Key.Namespaced() {
		r.kube.checkDestinations(pr.Steps)
	}
	return pr
}

// fromCreation says whether the policy arms objects at creation: what the operator reported in
// its status for this generation, or else whether its match can run at admission at all.
func fromCreation(v policy.View, c *policy.Compiled) string {
	if cond := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionProtectedFromCreation); cond != nil && cond.ObservedGeneration == v.Object.GetGeneration() {
		if cond.Status == metav1.ConditionTrue {
			return "yes: " + cond.Message
		}
		return fmt.Sprintf("no (%s): %s", cond.Reason, cond.Message)
	}
	if c.MatchNotAdmissible != nil {
		return fmt.Sprintf("no: %v; objects are armed only once the operator sees them", c.MatchNotAdmissible)
	}
	return ""
}

// planSteps renders each step as the run's first pass would see it; runNamespace holds the runs
// of cluster-scoped objects.
func planSteps(ctx context.Context, c *policy.Compiled, t *target, runNamespace string) []stepReport {
	snapshot, err := policy.Snapshot(t.Object.DeepCopy().Object)
	if err != nil {
		return []stepReport{{Name: "-", Error: err.Error()}}
	}
	run := c.NewRun(t.GVK, t.Object, snapshot)
	run.UID = "plan"
	if run.Namespace == "" {
		run.Namespace = runNamespace // where the operator puts the runs of cluster-scoped objects
	}
	now := time.Now()
	var out []stepReport
	nSteps, nFinally := len(c.Pipeline.Steps), len(c.Pipeline.Finally)
	for i, s := range c.Pipeline.All() {
		sr := stepReport{Name: s.Spec.Name, Kind: s.Kind}
		finally := i >= nSteps
		switch {
		case i >= nSteps+nFinally:
			sr.Kind = "onStuck " + s.Kind
		case finally:
			sr.Kind = "finally " + s.Kind
		}
		if s.When != nil && finally {
			// A finally step's guard reads how the pipeline ended, which no plan knows.
			sr.Guard = fmt.Sprintf("%s: decided when the pipeline ends (or the run is stuck)", s.When)
		} else if s.When != nil {
			// Evaluated, as by the run's pass, before the first attempt (run.attempt is 0).
			ok, err := s.When.EvalBool(ctx, pipeline.Input(run, &v1alpha1.StepStatus{Name: s.Spec.Name}, now).Vars)
			switch {
			case err != nil:
				sr.Guard = fmt.Sprintf("%s: cannot be evaluated now (%v); decided when the step is reached", s.When, err)
			case !ok:
				sr.Guard, sr.Summary = fmt.Sprintf("%s: false", s.When), "skipped"
				out = append(out, sr)
				continue
			default:
				sr.Guard = fmt.Sprintf("%s: true", s.When)
			}
		}
		if p, ok := s.Action.(steps.Planner); ok {
			// The status the run's pass gives the step's first attempt, its deadline included.
			plan := p.Plan(ctx, pipeline.Input(run, pipeline.Started(s, now), now))
			sr.Summary, sr.Error, sr.Rendered, sr.needs = plan.Summary, plan.Err, plan.Rendered, plan.Access
			if plan.Err != "" && readsSteps(s) {
				sr.Error = ""
				sr.Summary += fmt.Sprintf("; rendered when the step is reached, since it reads earlier steps' results (now: %s)", plan.Err)
			}
		} else {
			sr.Summary = "run the " + s.Kind + " step"
		}
		out = append(out, sr)
	}
	return out
}

// evaluateGuard evaluates a policy's deletion guard on the object, its lookups read live, as the
// operator does before publishing its verdict.
func (r *root) evaluateGuard(ctx context.Context, c *policy.Compiled, t *target) *planGuard {
	gr := &planGuard{Deny: c.Spec.DeletionGuard.Deny}
	policyNS := ""
	if c.Key.Namespaced() {
		policyNS = c.Key.Namespace
	}
	v, err := c.Guard.Evaluate(ctx, lookup.NewAPILister(r.kube.client, r.kube.mapper), t.Object.Object, t.Object.GetNamespace(), policyNS)
	if err != nil {
		gr.Error = err.Error()
		return gr
	}
	gr.Holds, gr.Message = v.Deny, v.Message
	return gr
}

// readsSteps reports whether a step's fields read earlier steps' results, which a plan does not
// have: steps.name, steps.?name, or the index form steps['name'] that names with "-" need.
func readsSteps(s *policy.Step) bool {
	raw, err := json.Marshal(s.Spec)
	return err == nil && (strings.Contains(string(raw), "steps.") || strings.Contains(string(raw), "steps["))
}

// dryRunDelete asks the API server whether the object may be deleted, changing nothing.
func (k *kube) dryRunDelete(ctx context.Context, obj *unstructured.Unstructured) string {
	o := obj.DeepCopy()
	if err := k.client.Delete(ctx, o, client.DryRunAll); err != nil {
		return "refused: " + oneLine(err.Error())
	}
	fins := obj.GetFinalizers()
	switch {
	case obj.GetDeletionTimestamp() != nil:
		return fmt.Sprintf("the object is already being deleted, held by its finalizers %s", strings.Join(fins, ", "))
	case len(fins) > 0:
		return fmt.Sprintf("allowed (dry run): the object would be marked for deletion and held by its finalizers %s", strings.Join(fins, ", "))
	}
	return "allowed (dry run): the object would be deleted at once, with no finalizer to hold it"
}

func printPlan(w io.Writer, rep *planReport) {
	fmt.Fprintf(w, "%s\n", rep.Object)
	printDeletion(w, rep)
	if len(rep.Policies) == 0 {
		fmt.Fprintf(w, "  no TeardownPolicy or ClusterTeardownPolicy targets this kind\n")
	}
	printElsewhere(w, rep.OtherNamespaces)
	for _, p := range rep.Policies {
		verdict := "protects it"
		if !p.Protects {
			verdict = "does not protect it: " + p.Why
		} else if p.Why != "" {
			verdict += " (" + p.Why + ")"
		}
		fmt.Fprintf(w, "\n%s %s\n", p.Policy, verdict)
		if p.FromCreation != "" {
			fmt.Fprintf(w, "  protected from creation: %s\n", p.FromCreation)
		}
		printVeto(w, p)
		for i, s := range p.Steps {
			fmt.Fprintf(w, "  %d. %s (%s): %s\n", i+1, s.Name, s.Kind, s.Summary)
			if s.Guard != "" {
				fmt.Fprintf(w, "       when %s\n", s.Guard)
			}
			if s.Error != "" {
				fmt.Fprintf(w, "       would fail: %s\n", s.Error)
			}
			if s.Destination != "" {
				fmt.Fprintf(w, "       note: %s\n", s.Destination)
			}
			for _, a := range s.Access {
				fmt.Fprintf(w, "       %s\n", a)
			}
			if s.Rendered != nil {
				raw, _ := yaml.Marshal(s.Rendered)
				fmt.Fprintf(w, "       %s\n", strings.ReplaceAll(strings.TrimSpace(string(raw)), "\n", "\n       "))
			}
		}
	}
	fmt.Fprintf(w, "\ndelete: %s\n", rep.Delete)
	if rep.Note != "" {
		fmt.Fprintf(w, "note: %s\n", rep.Note)
	}
}

// printVeto says what refuses the object's deletion before it starts: a two-phase trigger, a
// deletion guard's verdict now.
func printVeto(w io.Writer, p policyReport) {
	if p.Trigger != "" {
		fmt.Fprintf(w, "  trigger DeleteRequest: a plain delete is refused; the pipeline runs on a request (kubectl teardown delete), then the operator deletes the object\n")
	}
	g := p.DeletionGuard
	switch {
	case g == nil:
	case g.Error != "":
		fmt.Fprintf(w, "  deletion guard %s: cannot be evaluated now (%s); the operator keeps the object's last verdict\n", g.Deny, g.Error)
	case g.Holds:
		fmt.Fprintf(w, "  deletion guard %s: holds, a delete is refused: %s\n", g.Deny, g.Message)
	default:
		fmt.Fprintf(w, "  deletion guard %s: does not hold\n", g.Deny)
	}
}

func describeObject(kind string, obj *unstructured.Unstructured) string {
	if ns := obj.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", kind, ns, obj.GetName())
	}
	return fmt.Sprintf("%s %s", kind, obj.GetName())
}
