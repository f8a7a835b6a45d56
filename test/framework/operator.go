package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The service account config/default gives the operator.
const (
	OperatorNamespace = "teardown-system"
	OperatorName      = "teardown-operator"
)

// OperatorUser is the user name of the operator's service account.
func OperatorUser() string {
	return fmt.Sprintf("system:serviceaccount:%s:%s", OperatorNamespace, OperatorName)
}

// AsOperator returns a copy of cfg that acts as the operator's service account (impersonation),
// as the operator does once installed.
func AsOperator(cfg *rest.Config) *rest.Config {
	return AsServiceAccount(cfg, OperatorNamespace, OperatorName)
}

// AsServiceAccount returns a copy of cfg that acts as the service account namespace/name
// (impersonation), with the groups a service account's token carries.
func AsServiceAccount(cfg *rest.Config, namespace, name string) *rest.Config {
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", namespace, name),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
	return as
}

// BindOperatorRole creates the operator's ClusterRole from config/rbac/role.yaml and binds it to
// the service account namespace/name, as an install would; existing ones are kept.
func BindOperatorRole(ctx context.Context, c client.Client, root, namespace, name string) error {
	role, err := installClusterRole(ctx, c, root, "role.yaml")
	if err != nil {
		return err
	}
	binding := &rbacv1.ClusterRoleBinding{}
	binding.Name = role.Name
	if namespace != OperatorNamespace || name != OperatorName {
		binding.Name = fmt.Sprintf("%s-%s-%s", role.Name, namespace, name)
	}
	binding.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}
	binding.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}}
	return client.IgnoreAlreadyExists(c.Create(ctx, binding))
}

// OptInResourceSteps lets resource steps act as the ServiceAccounts of ns, as a cluster
// administrator does: the ClusterRole of config/rbac/resource_steps_role.yaml (created if need
// be) bound in ns to the operator's ServiceAccount namespace/name.
func OptInResourceSteps(ctx context.Context, c client.Client, root, ns, namespace, name string) error {
	role, err := installClusterRole(ctx, c, root, "resource_steps_role.yaml")
	if err != nil {
		return err
	}
	binding := &rbacv1.RoleBinding{}
	binding.Namespace, binding.Name = ns, fmt.Sprintf("%s-%s-%s", role.Name, namespace, name)
	binding.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}
	binding.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}}
	return client.IgnoreAlreadyExists(c.Create(ctx, binding))
}

// installClusterRole creates the ClusterRole of config/rbac/<file> (an existing one is kept) and
// returns it.
func installClusterRole(ctx context.Context, c client.Client, root, file string) (*rbacv1.ClusterRole, error) {
	raw, err := os.ReadFile(filepath.Join(root, "config", "rbac", file))
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(raw, role); err != nil {
		return nil, fmt.Errorf("config/rbac/%s: %w", file, err)
	}
	return role, client.IgnoreAlreadyExists(c.Create(ctx, role))
}
