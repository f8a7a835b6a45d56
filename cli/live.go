package cli

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/teardown-dev/teardown-operator/cli/manifest"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/kindtypes"
	"github.com/teardown-dev/teardown-operator/steps"
	"github.com/teardown-dev/teardown-operator/steps/builtin"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
)

// errReadOnly is what a plan's client answers any write with: a plan never changes the cluster.
var errReadOnly = fmt.Errorf("kubectl teardown plan is read-only")

// readOnly is c with every write refused.
func readOnly(c client.WithWatch) client.Client {
	refuse := func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
		return errReadOnly
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: refuse,
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return errReadOnly
		},
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return errReadOnly
		},
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
			return errReadOnly
		},
		DeleteAllOf: func(context.Context, client.WithWatch, client.Object, ...client.DeleteAllOfOption) error {
			return errReadOnly
		},
		SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return errReadOnly
		},
		SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			return errReadOnly
		},
		SubResourceCreate: func(context.Context, client.Client, string, client.Object, client.Object, ...client.SubResourceCreateOption) error {
			return errReadOnly
		},
	})
}

// anywhere admits every address: a plan compiles and renders requests to destinations the
// operator may have been told to allow (--http-allowed-destinations), and checks them apart
// (destinations).
var anywhere = []httpstep.Destination{
	{Prefix: netip.MustParsePrefix("0.0.0.0/0")}, {Prefix: netip.MustParsePrefix("::/0")},
}

// liveCompiler compiles policies as the operator in this cluster would: the built-in step
// kinds, reading (never writing) through the user's credentials, and discovery for scopes.
// Destinations are not refused here; see destinations.
func (k *kube) liveCompiler() (*policy.Compiler, error) {
	wc, err := client.NewWithWatch(k.cfg, client.Options{Scheme: manifest.Scheme, Mapper: k.mapper})
	if err != nil {
		return nil, err
	}
	ro := readOnly(wc)
	env, err := expr.NewEnv()
	if err != nil {
		return nil, err
	}
	// The operator's own kinds, with a client that cannot write; a plan never wakes a run, and
	// renders Jobs without asking whether their namespace is going.
	deps := steps.Deps{Client: ro, Reader: ro, Mapper: k.mapper, Wake: func(types.NamespacedName) {},
		NamespaceTerminating: func(context.Context, string) bool { return false }}
	kinds := steps.Build(builtin.Kinds(builtin.Options{HTTP: httpstep.Options{AllowedDestinations: anywhere}}), deps)
	dc, err := discovery.NewDiscoveryClientForConfig(k.cfg)
	if err != nil {
		return nil, err
	}
	return policy.NewCompiler(env, kinds, policy.KindScope(k.mapper)).WithKindTypes(kindtypes.NewDiscovery(dc.OpenAPIV3()).Type), nil
}

// age is a duration as kubectl prints ages.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// labelSet adapts a map to labels.Labels.
func labelSet(m map[string]string) labels.Set { return labels.Set(m) }

// setAllowedDestinations configures the kind plan checks http destinations with as the operator
// is: the user's list of its --http-allowed-destinations, and the API server of the kubeconfig.
func (k *kube) setAllowedDestinations(list string) error {
	allowed, err := parseDestinations(list)
	if err != nil {
		return err
	}
	k.destinations = httpstep.New(nil, nil, httpstep.Options{AllowedDestinations: allowed, APIServerHosts: []string{k.cfg.Host}})
	return nil
}

// checkDestinations notes on each rendered request of a TeardownPolicy whether the operator
// refuses its destination by default.
func (k *kube) checkDestinations(steps []stepReport) {
	for i := range steps {
		req, ok := steps[i].Rendered.(httpstep.RenderedRequest)
		if !ok || k.destinations == nil {
			continue
		}
		if err := k.destinations.CheckURL(req.URL, true); err != nil {
			steps[i].Destination = fmt.Sprintf("the operator refuses this request unless its --http-allowed-destinations allows the address: %v", err)
		}
	}
}

// parseDestinations reads a --http-allowed-destinations list, as the operator does.
func parseDestinations(list string) ([]httpstep.Destination, error) {
	var allowed []httpstep.Destination
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		d, err := httpstep.ParseDestination(s)
		if err != nil {
			return nil, usageError("--http-allowed-destinations: %v", err)
		}
		allowed = append(allowed, d)
	}
	return allowed, nil
}
