package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// otherObjectsShown bounds the earlier objects of a name that status lists by UID: a name
// reused every day would otherwise fill the screen; the count says how many there are.
const otherObjectsShown = 3

// followed is the object `status KIND/NAME` follows, from before its deletion until after it is
// gone. It is named by kind, namespace and name and, once seen, by its UID: an object created
// again under the same name is another object, with teardowns of its own.
type followed struct {
	arg       string // as the user named it, for hints
	gvk       schema.GroupVersionKind
	namespace string
	name      string
	uid       types.UID
}

// resolveFollowed maps KIND/NAME to a kind, namespace and name as kubectl does, without reading
// the object: it may be gone, and its runs kept.
func (k *kube) resolveFollowed(arg string) (*followed, error) {
	if !strings.Contains(arg, "/") {
		return nil, usageError("%q: name the object as KIND/NAME, for example deployment/web", arg)
	}
	infos, err := resource.NewBuilder(k.flags).Unstructured().NamespaceParam(k.namespace()).DefaultNamespace().
		ResourceTypeOrNameArgs(true, arg).SingleResourceType().RequireObject(false).Flatten().Do().Infos()
	if err != nil {
		return nil, apiError(err)
	}
	if len(infos) != 1 {
		return nil, usageError("%q names %d objects, not one", arg, len(infos))
	}
	info := infos[0]
	return &followed{arg: arg, gvk: info.Mapping.GroupVersionKind, namespace: info.Namespace, name: info.Name}, nil
}

// String names the object as status prints it: "ConfigMap shop/orders".
func (f *followed) String() string {
	if f.namespace != "" {
		return fmt.Sprintf("%s %s/%s", f.gvk.Kind, f.namespace, f.name)
	}
	return f.gvk.Kind + " " + f.name
}

// objectLook is what one look found of the followed object.
type objectLook struct {
	// live is the followed object; nil once it is gone.
	live *metav1.PartialObjectMetadata
	// successor is another object under its name (created again), which is not followed.
	successor *metav1.PartialObjectMetadata
	// runs are the followed object's kept runs, oldest first.
	runs []v1alpha1.TeardownRun
	// others counts the kept runs of other objects of that name, by UID.
	others map[types.UID]int
}

// look reads the object (its metadata), then its runs: in that order, so that a look that finds
// the object gone also finds every run recorded before it went.
func (f *followed) look(ctx context.Context, k *kube) (*objectLook, error) {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(f.gvk)
	err := k.client.Get(ctx, client.ObjectKey{Namespace: f.namespace, Name: f.name}, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, apiError(err)
	}
	l := &objectLook{runs: []v1alpha1.TeardownRun{}, others: map[types.UID]int{}}
	if err == nil {
		if f.uid == "" {
			f.uid = obj.UID
		}
		if obj.UID == f.uid {
			l.live = obj
		} else {
			l.successor = obj
		}
	}
	runs, err := k.runsNamed(ctx, f.gvk.GroupKind(), f.namespace, f.name)
	if err != nil {
		return nil, err
	}
	if f.uid == "" {
		if len(runs) == 0 {
			return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("%s not found, and no TeardownRun of an object of that name is kept", f)}
		}
		f.uid = runs[len(runs)-1].Spec.Target.UID // gone already: the object deleted last
	}
	for _, run := range runs {
		if run.Spec.Target.UID == f.uid {
			l.runs = append(l.runs, run)
		} else {
			l.others[run.Spec.Target.UID]++
		}
	}
	return l, nil
}

// ended says whether the object's teardown is over: every run of it finished, and the object is
// gone, or its runs leave it in place (Failed under Retain, Cancelled), or it is being deleted
// and no teardown finalizer is left on it (other controllers' may hold it longer).
func (l *objectLook) ended() bool {
	for i := range l.runs {
		if !l.runs[i].Status.Phase.Finished() {
			return false
		}
	}
	switch {
	case l.live == nil:
		return true
	case slices.ContainsFunc(l.runs, keepsObject):
		return true
	}
	return l.live.DeletionTimestamp != nil && len(teardownFinalizers(l.live.Finalizers)) == 0
}

// keepsObject reports whether a finished run leaves its object in place.
func keepsObject(run v1alpha1.TeardownRun) bool {
	ph := run.Status.Phase
	return ph == v1alpha1.RunCancelled || ph == v1alpha1.RunFailed && !ph.Releases(run.Spec.Pipeline.FailurePolicy)
}

// waitsOnOperator reports whether something here waits for the operator to act: a run in flight,
// or an object being deleted that a teardown finalizer holds with no run yet.
func (l *objectLook) waitsOnOperator() bool {
	return l.live != nil && l.live.DeletionTimestamp != nil && len(l.runs) == 0 && len(teardownFinalizers(l.live.Finalizers)) > 0
}

// outcome is how runs that all finished went: nil when each succeeded (or there was none), else
// an ExitFindings error naming the first that did not.
func outcome(runs []v1alpha1.TeardownRun) error {
	for i := range runs {
		run := &runs[i]
		if run.Status.Phase == v1alpha1.RunSucceeded {
			continue
		}
		hint := ""
		if keepsObject(*run) && run.Status.Phase == v1alpha1.RunFailed {
			hint = fmt.Sprintf("; it keeps its object: fix the cause, then kubectl teardown retry %s -n %s, or abandon", run.Name, run.Namespace)
		}
		return &ExitError{Code: ExitFindings, Err: fmt.Errorf("teardownrun %s/%s ended %s: %s%s",
			run.Namespace, run.Name, phaseOf(run), truncate(firstLineOf(run.Status.Message), runMessage), hint)}
	}
	return nil
}

// teardownFinalizers are the finalizers of teardown policies among fins.
func teardownFinalizers(fins []string) []string {
	return slices.DeleteFunc(slices.Clone(fins), func(f string) bool { return !naming.IsOurs(f) })
}

// print writes what the look found of the object, above its runs' trees.
func (l *objectLook) print(w io.Writer, f *followed, op operatorState) {
	switch obj := l.live; {
	case obj == nil:
		fmt.Fprintf(w, "%s  gone  (uid %s)\n", f, f.uid)
		if s := l.successor; s != nil {
			fmt.Fprintf(w, "  an object of that name exists again (uid %s, created %s ago): another object, not followed here\n",
				s.UID, age(time.Since(s.CreationTimestamp.Time)))
		}
		if len(l.runs) == 0 {
			fmt.Fprintln(w, "  no TeardownRun of it is kept (none was recorded, or retention deleted them)")
		}
	case obj.DeletionTimestamp == nil:
		fmt.Fprintf(w, "%s  not being deleted  (uid %s)\n", f, obj.UID)
		fins := teardownFinalizers(obj.Finalizers)
		switch {
		case len(fins) == 0:
			fmt.Fprintf(w, "  not protected: no teardown finalizer on it (kubectl teardown plan %s says why)\n", withNamespace(f.arg, f.namespace))
		case len(l.runs) == 0:
			fmt.Fprintf(w, "  protected by  %s\n  no teardown run yet: runs start when it is deleted (kubectl teardown plan %s shows what would run)\n",
				strings.Join(fins, ", "), withNamespace(f.arg, f.namespace))
		default:
			fmt.Fprintf(w, "  protected by  %s\n", strings.Join(fins, ", "))
		}
	default:
		l.printDeleting(w, f, op)
	}
	l.printOthers(w)
}

// printDeleting describes an object being deleted: since when, what holds it, and why no run
// acts on it when none does.
func (l *objectLook) printDeleting(w io.Writer, f *followed, op operatorState) {
	obj := l.live
	ts := obj.DeletionTimestamp.Time
	fmt.Fprintf(w, "%s  being deleted since %s (%s ago)  (uid %s)\n", f, ts.UTC().Format(time.RFC3339), age(time.Since(ts)), obj.UID)
	fins := teardownFinalizers(obj.Finalizers)
	others := slices.DeleteFunc(slices.Clone(obj.Finalizers), naming.IsOurs)
	if len(fins) > 0 {
		fmt.Fprintf(w, "  held by  %s\n", strings.Join(fins, ", "))
	}
	if len(others) > 0 {
		fmt.Fprintf(w, "  also held by other controllers' finalizers: %s\n", strings.Join(others, ", "))
	}
	switch {
	case len(l.runs) > 0:
	case len(fins) == 0:
		fmt.Fprintln(w, "  no teardown run: no teardown finalizer holds it")
	case op.down():
		fmt.Fprintln(w, "  no teardown run has started: the operator is not running (below)")
	default:
		fmt.Fprintln(w, "  no teardown run has started: the operator has not acted on it yet")
	}
}

// printOthers says which other objects of the same name have runs kept.
func (l *objectLook) printOthers(w io.Writer) {
	if len(l.others) == 0 {
		return
	}
	uids := slices.Sorted(maps.Keys(l.others))
	var shown []string
	for _, uid := range uids[:min(len(uids), otherObjectsShown)] {
		shown = append(shown, fmt.Sprintf("uid %s (%d run(s))", uid, l.others[uid]))
	}
	if more := len(uids) - otherObjectsShown; more > 0 {
		shown = append(shown, fmt.Sprintf("and %d more", more))
	}
	fmt.Fprintf(w, "  %d other object(s) of that name have kept runs, not shown: %s; kubectl get teardownruns -A -l %s=UID lists them\n",
		len(uids), strings.Join(shown, ", "), v1alpha1.LabelTargetUID)
}
