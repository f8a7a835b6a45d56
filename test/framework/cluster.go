package framework

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/admissiontrust"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StartCluster starts (or reuses) the local kwok cluster named name with test/cluster/up.sh and
// returns its kubeconfig path. root is the repository root; env adds up.sh settings
// ("AUDIT_POLICY=...").
func StartCluster(root, name string, env ...string) (string, error) {
	return startScript(root, "up.sh", name, env)
}

// startScript runs test/cluster/<script> for the cluster named name and returns the last line it
// printed, the kubeconfig path.
func startScript(root, script, name string, env []string) (string, error) {
	cmd := exec.Command("bash", filepath.Join(root, "test", "cluster", script))
	cmd.Env = append(append(os.Environ(), "CLUSTER_NAME="+name), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("test/cluster/%s: %w\n%s", script, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// ClusterLogs is the directory of the logs of the local kwok cluster named name (audit.log, when
// it was started with an audit policy).
func ClusterLogs(root, name string) string {
	return filepath.Join(root, "bin", "kwok-state", "clusters", name, "logs")
}

// StopCluster deletes the local kwok cluster named name.
func StopCluster(root, name string) error {
	return stopScript(root, "down.sh", name)
}

// stopScript runs test/cluster/<script> for the cluster named name.
func stopScript(root, script, name string) error {
	cmd := exec.Command("bash", filepath.Join(root, "test", "cluster", script))
	cmd.Env = append(os.Environ(), "CLUSTER_NAME="+name)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("test/cluster/%s: %w\n%s", script, err, out)
	}
	return nil
}

// InstallCRDs creates or updates every CRD in dir and waits until each is established.
func InstallCRDs(ctx context.Context, c client.Client, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s: %v", dir, err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := utilyaml.Unmarshal(raw, crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := InstallCRD(ctx, c, crd); err != nil {
			return err
		}
	}
	return nil
}

// InstallCRD creates or updates crd and waits until it is established.
func InstallCRD(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	existing := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(crd), existing); err == nil {
		crd.ResourceVersion = existing.ResourceVersion
		if err := c.Update(ctx, crd); err != nil {
			return fmt.Errorf("updating %s: %w", crd.Name, err)
		}
	} else if err := c.Create(ctx, crd); err != nil {
		return fmt.Errorf("creating %s: %w", crd.Name, err)
	}
	return waitEstablished(ctx, c, crd.Name)
}

func waitEstablished(ctx context.Context, c client.Client, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err == nil {
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("CRD " + name + " not established after 30s")
}

// InstallAdmissionPolicies creates the ValidatingAdmissionPolicies and bindings in
// config/admission (deletion guards and the marks they rest on, approvals, requests), as an install would; existing ones are
// kept.
func InstallAdmissionPolicies(ctx context.Context, c client.Client, root string) error {
	for _, file := range []string{"deletion_guard.yaml", "marks.yaml", "approvals.yaml", "requests.yaml"} {
		if err := installManifests(ctx, c, filepath.Join(root, "config", "admission", file)); err != nil {
			return err
		}
	}
	return nil
}

// InstallRequestsPolicy creates the ValidatingAdmissionPolicy and binding that check requests
// (config/admission/requests.yaml) alone; an existing one is kept.
func InstallRequestsPolicy(ctx context.Context, c client.Client, root string) error {
	return installManifests(ctx, c, filepath.Join(root, "config", "admission", "requests.yaml"))
}

// AwaitApprovalsTrusted waits until the operator trusts approvals: admissiontrust.Settle after the
// admission policy that checks approvers, and its binding, were created or last written.
func AwaitApprovalsTrusted(ctx context.Context, c client.Client) error {
	return awaitTrusted(ctx, c, v1alpha1.ApprovalPolicyName)
}

// AwaitRequestsTrusted waits until the operator trusts requests (delete-requested, abandon,
// retry), as AwaitApprovalsTrusted does for approvals.
func AwaitRequestsTrusted(ctx context.Context, c client.Client) error {
	return awaitTrusted(ctx, c, v1alpha1.RequestsPolicyName)
}

// Request is the value of a request annotation that the admission policy that checks requests
// admits from c's user: "<user name>: <why>".
func Request(ctx context.Context, c client.Client, why string) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", fmt.Errorf("asking who the client is: %w", err)
	}
	return review.Status.UserInfo.Username + ": " + why, nil
}

// AwaitInForce waits until the API server enforces the admission policy name (as the operator
// reckons it: admissiontrust.Settle after its or its binding's last write).
func AwaitInForce(ctx context.Context, c client.Client, name string) error {
	return awaitTrusted(ctx, c, name)
}

func awaitTrusted(ctx context.Context, c client.Client, name string) error {
	in, err := admissiontrust.Read(ctx, c, name)
	if err != nil {
		return err
	}
	// Times are in whole seconds: a second more covers the rounding.
	time.Sleep(time.Until(in.Since().Add(time.Second)))
	return nil
}

// InstallUserRoles creates the users' ClusterRoles of config/rbac/user_roles.yaml (the approver's
// among them), as an install would; existing ones are kept.
func InstallUserRoles(ctx context.Context, c client.Client, root string) error {
	return installManifests(ctx, c, filepath.Join(root, "config", "rbac", "user_roles.yaml"))
}

// installManifests creates the objects of a multi-document manifest of built-in kinds.
func installManifests(ctx context.Context, c client.Client, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	decoder := serializer.NewCodecFactory(clientgoscheme.Scheme).UniversalDeserializer()
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		obj, _, err := decoder.Decode([]byte(doc), nil, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(path), err)
		}
		if err := client.IgnoreAlreadyExists(c.Create(ctx, obj.(client.Object))); err != nil {
			return err
		}
	}
	return nil
}

// ReadAudit decodes each line of the audit log of the local kwok cluster named name (started with
// an audit policy) into a fresh T and calls fn with it; lines that are not JSON are skipped. maxLine
// bounds a line: an event carrying a request body is long.
func ReadAudit[T any](root, name string, maxLine int, fn func(*T)) error {
	f, err := os.Open(filepath.Join(ClusterLogs(root, name), "audit.log"))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), maxLine)
	for sc.Scan() {
		var ev T
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			fn(&ev)
		}
	}
	return sc.Err()
}
