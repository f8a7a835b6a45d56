package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/teardown-dev/teardown-operator/cli/manifest"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Client rate limits: above client-go's defaults (5, 10), which would make drain's listing of every
// kind crawl, and well under what an API server serves one client.
const (
	clientQPS   = 50
	clientBurst = 100
)

// kube builds the clients of live commands from the kubeconfig flags, once.
type kube struct {
	flags  *genericclioptions.ConfigFlags
	cfg    *rest.Config
	mapper meta.RESTMapper
	client client.Client
	// logs reads pod logs (pods/log is no object the controller-runtime client reads); made once.
	logs kubernetes.Interface
	// destinations checks http destinations as the operator does by default (plan).
	destinations *httpstep.Kind
	// clusterPoliciesHidden records that the user may not list ClusterTeardownPolicies.
	clusterPoliciesHidden bool
	// runNamespace is the operator's namespace, where the runs of cluster-scoped objects live.
	runNamespace string
}

// connect builds the clients; errors are usage errors (no kubeconfig, unreachable cluster).
func (k *kube) connect() error {
	if k.client != nil {
		return nil
	}
	cfg, err := k.flags.ToRESTConfig()
	if err != nil {
		return usageError("kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	// Deprecation warnings of kinds drain lists are not the user's concern; errors are.
	cfg.WarningHandler = rest.NoWarnings{}
	mapper, err := k.flags.ToRESTMapper()
	if err != nil {
		return usageError("discovery: %v", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: manifest.Scheme, Mapper: mapper})
	if err != nil {
		return usageError("client: %v", err)
	}
	k.cfg, k.mapper, k.client = cfg, mapper, c
	return nil
}

// clientset is a client-go clientset of the same config, for pod logs; made on first use, so
// that status --watch does not make one per look.
func (k *kube) clientset() (kubernetes.Interface, error) {
	if k.logs == nil {
		cs, err := kubernetes.NewForConfig(k.cfg)
		if err != nil {
			return nil, err
		}
		k.logs = cs
	}
	return k.logs, nil
}

// namespace is -n, or the kubeconfig context's namespace.
func (k *kube) namespace() string {
	ns, _, err := k.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil || ns == "" {
		return "default"
	}
	return ns
}

// target is an object named KIND/NAME on the command line.
type target struct {
	GVK        schema.GroupVersionKind
	Namespaced bool
	Object     *unstructured.Unstructured
}

// getTarget reads the object named by arg (kubectl's forms: deployment/web, deploy/web,
// manageddatabases.example.teardown.dev/orders).
func (k *kube) getTarget(ctx context.Context, arg string) (*target, error) {
	if !strings.Contains(arg, "/") {
		return nil, usageError("%q: name the object as KIND/NAME, for example deployment/web", arg)
	}
	res := resource.NewBuilder(k.flags).Unstructured().NamespaceParam(k.namespace()).DefaultNamespace().
		ResourceTypeOrNameArgs(true, arg).SingleResourceType().Flatten().Do()
	infos, err := res.Infos()
	if err != nil {
		return nil, apiError(err)
	}
	if len(infos) != 1 {
		return nil, usageError("%q names %d objects, not one", arg, len(infos))
	}
	info := infos[0]
	u, ok := info.Object.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("%s: unexpected %T", arg, info.Object)
	}
	return &target{GVK: info.Mapping.GroupVersionKind, Namespaced: info.Mapping.Scope.Name() == meta.RESTScopeNameNamespace, Object: u}, nil
}

// apiError makes the errors a user causes (no such kind or object, no permission) usage errors,
// in one line.
func apiError(err error) error {
	switch {
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err), apierrors.IsUnauthorized(err),
		meta.IsNoMatchError(err), isUnknownResource(err):
		return &ExitError{Code: ExitUsage, Err: err}
	}
	var se *apierrors.StatusError
	if errors.As(err, &se) && se.Status().Code == 400 {
		return &ExitError{Code: ExitUsage, Err: err}
	}
	return err
}

func isUnknownResource(err error) bool {
	return strings.Contains(err.Error(), "the server doesn't have a resource type")
}
