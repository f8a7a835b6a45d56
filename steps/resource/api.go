package resource

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/teardown-dev/teardown-operator/internal/fence"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// Identity is whom a step's API calls are made as: a ServiceAccount, or (zero) the operator.
type Identity struct {
	Namespace, Name string
}

// IsOperator reports whether the calls are made with the operator's own rights.
func (id Identity) IsOperator() bool { return id.Name == "" }

// String names the identity as a message shows it.
func (id Identity) String() string {
	if id.IsOperator() {
		return "the operator"
	}
	return fmt.Sprintf("ServiceAccount %s/%s", id.Namespace, id.Name)
}

// Username is the user the API server sees: system:serviceaccount:<namespace>:<name>.
func (id Identity) Username() string {
	return "system:serviceaccount:" + id.Namespace + ":" + id.Name
}

// Ref is one object: its kind, namespace (empty for a cluster-scoped kind) and name.
type Ref struct {
	GVK       schema.GroupVersionKind
	Namespace string
	Name      string
}

func (r Ref) String() string {
	if r.Namespace == "" {
		return r.GVK.Kind + " " + r.Name
	}
	return r.GVK.Kind + " " + r.Namespace + "/" + r.Name
}

// API is what a resource step does to the cluster, each call as one identity. The operator's
// implementation is Dynamic; kubectl teardown test puts a scripted world in its place.
type API interface {
	// Namespaced reports whether the cluster serves the kind namespaced; an error means it is not
	// served.
	Namespaced(gvk schema.GroupVersionKind) (bool, error)
	Get(ctx context.Context, id Identity, ref Ref) (*unstructured.Unstructured, error)
	List(ctx context.Context, id Identity, gvk schema.GroupVersionKind, namespace string, sel labels.Selector, limit int64) ([]unstructured.Unstructured, error)
	Create(ctx context.Context, id Identity, obj *unstructured.Unstructured) (*unstructured.Unstructured, error)
	// Apply is a server-side apply of obj by the field manager manager, forcing conflicts.
	Apply(ctx context.Context, id Identity, obj *unstructured.Unstructured, manager string) (*unstructured.Unstructured, error)
	Patch(ctx context.Context, id Identity, ref Ref, pt types.PatchType, data []byte, subresource string) (*unstructured.Unstructured, error)
	// Delete deletes the object with the UID uid (any, when empty).
	Delete(ctx context.Context, id Identity, ref Ref, propagation metav1.DeletionPropagation, uid types.UID) error
}

// FieldManager is the field manager of the step's creates and patches. A server-side apply has a
// manager of its own per policy and step (ApplyManager): one manager's apply removes the fields it
// no longer sends, so two steps applying parts of one object must not share one.
const FieldManager = "teardown-operator"

// ApplyManager is the field manager of a step's server-side applies: teardown-operator/<policy
// kind>/<policy namespace>/<policy name>/<step>, shortened with a hash past 128 characters.
func ApplyManager(policyKind, policyNamespace, policyName, step string) string {
	return naming.Shorten(strings.Join([]string{FieldManager, policyKind, policyNamespace, policyName, step}, "/"), 128)
}

// Dynamic is the API through the API server: a dynamic client per identity, impersonating the
// ServiceAccount (the operator needs the impersonate verb on serviceaccounts, nothing else of
// theirs), with kinds mapped to resources by discovery.
type Dynamic struct {
	config *rest.Config
	mapper meta.RESTMapper
	fence  func() error

	mu      sync.Mutex
	clients map[Identity]dynamic.Interface
	// seen is when each ServiceAccount was last found to exist (exists).
	seen map[Identity]time.Time
}

// seenFor is how long a ServiceAccount found to exist is not looked up again.
const seenFor = 10 * time.Second

// serviceAccounts is the resource of ServiceAccounts.
var serviceAccounts = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}

// exists refuses to act as a ServiceAccount that does not exist: the API server lets the operator
// impersonate any name, and a RoleBinding left to a deleted ServiceAccount still grants its rights
// to that name, which no pod can use. It is asked with the operator's own rights, at most every
// seenFor per ServiceAccount.
func (d *Dynamic) exists(ctx context.Context, id Identity) error {
	if id.IsOperator() {
		return nil
	}
	if id.Namespace == SystemNamespace {
		return errors.New(systemRefusal) // also checked when the policy is compiled
	}
	d.mu.Lock()
	at, ok := d.seen[id]
	d.mu.Unlock()
	if ok && time.Since(at) < seenFor {
		return nil
	}
	c, err := d.client(Identity{})
	if err != nil {
		return err
	}
	_, err = c.Resource(serviceAccounts).Namespace(id.Namespace).Get(ctx, id.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return &NoServiceAccountError{Identity: id}
	case err != nil:
		return fmt.Errorf("reading %s: %w", id, err)
	}
	d.mu.Lock()
	if len(d.seen) >= maxClients {
		d.seen = map[Identity]time.Time{}
	}
	d.seen[id] = time.Now()
	d.mu.Unlock()
	return nil
}

// NoServiceAccountError is a step's ServiceAccount that does not exist.
type NoServiceAccountError struct{ Identity Identity }

func (e *NoServiceAccountError) Error() string {
	return fmt.Sprintf("%s does not exist: a step acts only as a ServiceAccount that exists (create it, or fix the step's serviceAccountName)", e.Identity)
}

// maxClients bounds the clients kept, one per identity; past it they are built again (they
// share the operator's connections, so a new one costs little).
const maxClients = 256

// NewDynamic returns the API through the API server of config. fenceCheck, when set, is checked
// before every write (internal/fence).
func NewDynamic(config *rest.Config, mapper meta.RESTMapper, fenceCheck func() error) *Dynamic {
	if config != nil && config.RateLimiter == nil && config.QPS > 0 {
		// One limit for every identity's client, as for one client: clients of their own would
		// each get a bucket of their own, and the operator's rate would grow with them.
		config = rest.CopyConfig(config)
		config.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(config.QPS, config.Burst)
	}
	return &Dynamic{config: config, mapper: mapper, fence: fenceCheck, clients: map[Identity]dynamic.Interface{}, seen: map[Identity]time.Time{}}
}

func (d *Dynamic) client(id Identity) (dynamic.Interface, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.clients[id]; ok {
		return c, nil
	}
	if d.config == nil {
		return nil, fmt.Errorf("no API server configured")
	}
	cfg := rest.CopyConfig(d.config)
	if !id.IsOperator() {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: id.Username()}
	}
	if d.fence != nil {
		cfg.Wrap(fence.Transport(d.fence))
	}
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building a client for %s: %w", id, err)
	}
	if len(d.clients) >= maxClients {
		d.clients = map[Identity]dynamic.Interface{}
	}
	d.clients[id] = c
	return c, nil
}

// Namespaced implements API.
func (d *Dynamic) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	m, err := d.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return false, fmt.Errorf("kind %s is not served: %w", gvk, err)
	}
	return m.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

func (d *Dynamic) resource(ctx context.Context, id Identity, gvk schema.GroupVersionKind, namespace string) (dynamic.ResourceInterface, error) {
	m, err := d.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("kind %s is not served: %w", gvk, err)
	}
	if err := d.exists(ctx, id); err != nil {
		return nil, err
	}
	c, err := d.client(id)
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.Resource(m.Resource).Namespace(namespace), nil
	}
	return c.Resource(m.Resource), nil
}

// Get implements API.
func (d *Dynamic) Get(ctx context.Context, id Identity, ref Ref) (*unstructured.Unstructured, error) {
	r, err := d.resource(ctx, id, ref.GVK, ref.Namespace)
	if err != nil {
		return nil, err
	}
	return r.Get(ctx, ref.Name, metav1.GetOptions{})
}

// List implements API.
func (d *Dynamic) List(ctx context.Context, id Identity, gvk schema.GroupVersionKind, namespace string, sel labels.Selector, limit int64) ([]unstructured.Unstructured, error) {
	r, err := d.resource(ctx, id, gvk, namespace)
	if err != nil {
		return nil, err
	}
	list, err := r.List(ctx, metav1.ListOptions{LabelSelector: sel.String(), Limit: limit})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Create implements API.
func (d *Dynamic) Create(ctx context.Context, id Identity, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	r, err := d.resource(ctx, id, obj.GroupVersionKind(), obj.GetNamespace())
	if err != nil {
		return nil, err
	}
	return r.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
}

// Apply implements API.
func (d *Dynamic) Apply(ctx context.Context, id Identity, obj *unstructured.Unstructured, manager string) (*unstructured.Unstructured, error) {
	r, err := d.resource(ctx, id, obj.GroupVersionKind(), obj.GetNamespace())
	if err != nil {
		return nil, err
	}
	return r.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: manager, Force: true})
}

// Patch implements API.
func (d *Dynamic) Patch(ctx context.Context, id Identity, ref Ref, pt types.PatchType, data []byte, subresource string) (*unstructured.Unstructured, error) {
	r, err := d.resource(ctx, id, ref.GVK, ref.Namespace)
	if err != nil {
		return nil, err
	}
	var sub []string
	if subresource != "" {
		sub = []string{subresource}
	}
	return r.Patch(ctx, ref.Name, pt, data, metav1.PatchOptions{FieldManager: FieldManager}, sub...)
}

// Delete implements API.
func (d *Dynamic) Delete(ctx context.Context, id Identity, ref Ref, propagation metav1.DeletionPropagation, uid types.UID) error {
	r, err := d.resource(ctx, id, ref.GVK, ref.Namespace)
	if err != nil {
		return err
	}
	opts := metav1.DeleteOptions{PropagationPolicy: &propagation}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	return r.Delete(ctx, ref.Name, opts)
}
