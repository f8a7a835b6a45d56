package cli

import (
	"context"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/cli/lint"
	"github.com/teardown-dev/teardown-operator/cli/manifest"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// fileReport is what a policy file would protect.
type fileReport struct {
	Policy   string          `json:"policy"`
	Error    string          `json:"error,omitempty"`
	Protects []string        `json:"protects"`
	Skips    []skippedObject `json:"skips"`
}

type skippedObject struct {
	Object string `json:"object"`
	Why    string `json:"why"`
}

// planFile lists, for each policy of a file, the objects of the cluster it would protect.
func (r *root) planFile(ctx context.Context, file, output string) error {
	docs, err := manifest.Read([]string{file}, r.streams.In)
	if err != nil {
		return readError(err)
	}
	compiler, err := r.kube.liveCompiler()
	if err != nil {
		return err
	}
	var reports []fileReport
	for _, d := range docs {
		if !lint.IsPolicy(d.Object) {
			continue
		}
		rep, err := r.planPolicyFile(ctx, compiler, d)
		if err != nil {
			return err
		}
		reports = append(reports, rep)
	}
	if len(reports) == 0 {
		return usageError("%s holds no TeardownPolicy or ClusterTeardownPolicy", file)
	}
	return r.print(reports, output, func(w io.Writer) { printFileReports(w, reports) })
}

func (r *root) planPolicyFile(ctx context.Context, compiler *policy.Compiler, d *manifest.Document) (fileReport, error) {
	view, err := lint.PolicyOf(d.Object, r.kube.namespace())
	if err != nil {
		return fileReport{}, usageError("%s: %v", d.Where(0), err)
	}
	rep := fileReport{Policy: view.Key.String(), Protects: []string{}, Skips: []skippedObject{}}
	c, errs := compiler.Compile(view)
	if len(errs) > 0 {
		rep.Error = "does not compile: " + errs.ToAggregate().Error()
		return rep, nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(c.GVK.GroupVersion().WithKind(c.GVK.Kind + "List"))
	var opts []client.ListOption
	if view.Key.Namespaced() {
		opts = append(opts, client.InNamespace(view.Key.Namespace))
	}
	if err := r.kube.client.List(ctx, list, opts...); err != nil {
		return rep, apiError(err)
	}
	for i := range list.Items {
		it := &list.Items[i]
		name := describeObject(c.GVK.Kind, it)
		if why := r.kube.selectsWhyNot(ctx, c, it); why != "" {
			rep.Skips = append(rep.Skips, skippedObject{Object: name, Why: why})
		} else {
			rep.Protects = append(rep.Protects, name)
		}
	}
	return rep, nil
}

func printFileReports(w io.Writer, reports []fileReport) {
	for _, rep := range reports {
		if rep.Error != "" {
			fmt.Fprintf(w, "%s %s\n", rep.Policy, rep.Error)
			continue
		}
		colon := ":"
		if len(rep.Protects)+len(rep.Skips) == 0 {
			colon = ""
		}
		fmt.Fprintf(w, "%s would protect %d %s%s\n", rep.Policy, len(rep.Protects), plural(len(rep.Protects), "object", "objects"), colon)
		for _, o := range rep.Protects {
			fmt.Fprintf(w, "  %s\n", o)
		}
		for _, s := range rep.Skips {
			fmt.Fprintf(w, "  not %s: %s\n", s.Object, s.Why)
		}
	}
}
