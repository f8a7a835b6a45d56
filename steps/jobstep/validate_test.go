package jobstep

import (
	"testing"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// container is a JSON container with extra fields after name and image.
func container(name, image, extra string) string {
	c := `{"name": "` + name + `", "image": "` + image + `"`
	if extra != "" {
		c += ", " + extra
	}
	return c + "}"
}

// podSpec is a JobSpec whose pod has containers (and the pod fields in extra).
func podSpec(extra string, containers ...string) string {
	s := `{"template": {"spec": {`
	if extra != "" {
		s += extra + ", "
	}
	s += `"containers": [`
	for i, c := range containers {
		if i > 0 {
			s += ", "
		}
		s += c
	}
	return s + "]}}}"
}

// TestCompileAPIServerChecks: what the API server refuses in the Job a step creates is refused
// when the step is compiled, at the template's field, in the API server's words; a value with
// ${...} is known only when rendered, and is not checked.
func TestCompileAPIServerChecks(t *testing.T) {
	const pod = "spec.steps[0].job.template.spec.template.spec"
	tests := map[string]struct {
		spec string
		// want is each error's whole text; none when the template is valid.
		want []string
	}{
		"a container without an image": {
			spec: podSpec("", `{"name": "dump"}`),
			want: []string{pod + ".containers[0].image: Required value"},
		},
		"a container without a name": {
			spec: podSpec("", `{"image": "busybox"}`),
			want: []string{pod + ".containers[0].name: Required value"},
		},
		"a container name that is no DNS-1123 label": {
			spec: podSpec("", container("Dump_DB", "busybox", "")),
			want: []string{pod + `.containers[0].name: Invalid value: "Dump_DB": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`},
		},
		"a name shared by an init container and a container": {
			spec: podSpec(`"initContainers": [`+container("dump", "busybox", "")+`]`, container("dump", "busybox", "")),
			want: []string{pod + `.initContainers[0].name: Duplicate value: "dump"`},
		},
		"two containers of one name": {
			spec: podSpec("", container("dump", "busybox", ""), container("dump", "alpine", "")),
			want: []string{pod + `.containers[1].name: Duplicate value: "dump"`},
		},
		"restartPolicy Always": {
			spec: podSpec(`"restartPolicy": "Always"`, container("dump", "busybox", "")),
			want: []string{pod + `.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"`},
		},
		"restartPolicy OnFailure with a podFailurePolicy": {
			spec: `{"podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}}]},
				"template": {"spec": {"restartPolicy": "OnFailure", "containers": [` + container("dump", "busybox", "") + `]}}}`,
			want: []string{pod + `.restartPolicy: Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified`},
		},
		"a mount of a volume the pod does not have": {
			spec: podSpec(`"volumes": [{"name": "scratch", "emptyDir": {}}]`, container("dump", "busybox", `"volumeMounts": [{"name": "data", "mountPath": "/data"}]`)),
			want: []string{pod + `.containers[0].volumeMounts[0].name: Not found: "data"`},
		},
		"a mount without a path": {
			spec: podSpec(`"volumes": [{"name": "data", "emptyDir": {}}]`, container("dump", "busybox", `"volumeMounts": [{"name": "data"}]`)),
			want: []string{pod + ".containers[0].volumeMounts[0].mountPath: Required value"},
		},
		"two volumes of one name": {
			spec: podSpec(`"volumes": [{"name": "data", "emptyDir": {}}, {"name": "data", "emptyDir": {}}]`, container("dump", "busybox", "")),
			want: []string{pod + `.volumes[1].name: Duplicate value: "data"`},
		},
		"an env var without a name": {
			spec: podSpec("", container("dump", "busybox", `"env": [{"value": "x"}]`)),
			want: []string{pod + ".containers[0].env[0].name: Required value"},
		},
		"a port out of range, and one without a number": {
			spec: podSpec("", container("dump", "busybox", `"ports": [{"containerPort": 70000}, {"name": "http"}]`)),
			want: []string{
				pod + ".containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
				pod + ".containers[0].ports[1].containerPort: Required value",
			},
		},
		"an imagePullPolicy in the wrong case": {
			spec: podSpec("", container("dump", "busybox", `"imagePullPolicy": "always"`)),
			want: []string{pod + `.containers[0].imagePullPolicy: Unsupported value: "always": supported values: "Always", "IfNotPresent", "Never"`},
		},
		"a request over its limit": {
			spec: podSpec("", container("dump", "busybox", `"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}`)),
			want: []string{pod + `.containers[0].resources.requests: Invalid value: "2Gi": must be less than or equal to memory limit of 1Gi`},
		},
		"a negative backoffLimit": {
			spec: `{"backoffLimit": -1, "template": {"spec": {"containers": [` + container("dump", "busybox", "") + `]}}}`,
			want: []string{"spec.steps[0].job.template.spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0"},
		},
		"a negative activeDeadlineSeconds": {
			spec: `{"activeDeadlineSeconds": -5, "template": {"spec": {"containers": [` + container("dump", "busybox", "") + `]}}}`,
			want: []string{"spec.steps[0].job.template.spec.activeDeadlineSeconds: Invalid value: -5: must be greater than or equal to 0"},
		},
		"port names and protocols": {
			spec: podSpec("", container("dump", "busybox", `"ports": [{"containerPort": 80, "protocol": "tcp", "name": "Http_Port"}]`)),
			want: []string{
				pod + `.containers[0].ports[0].name: Invalid value: "Http_Port": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)`,
				pod + `.containers[0].ports[0].protocol: Unsupported value: "tcp": supported values: "SCTP", "TCP", "UDP"`,
			},
		},
		"a serviceAccountName that is no DNS subdomain": {
			spec: podSpec(`"serviceAccountName": "Backup_SA"`, container("dump", "busybox", "")),
			want: []string{pod + `.serviceAccountName: Invalid value: "Backup_SA": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		},
		"an image known at run time": {
			spec: podSpec("", container("dump", "${object.data.image}", "")),
		},
		"container names known at run time, alike once replaced by the placeholder": {
			spec: podSpec("", container("${object.metadata.name}", "busybox", ""), container("${object.metadata.name + '-b'}", "busybox", "")),
		},
		"a restartPolicy known at run time": {
			spec: podSpec(`"restartPolicy": "${object.data.policy}"`, container("dump", "busybox", "")),
		},
		"a mount of a volume whose name is known at run time": {
			spec: podSpec(`"volumes": [{"name": "${object.metadata.name}", "emptyDir": {}}]`, container("dump", "busybox", `"volumeMounts": [{"name": "data", "mountPath": "/data"}]`)),
		},
		"a request known at run time": {
			spec: podSpec("", container("dump", "busybox", `"resources": {"requests": {"memory": "${object.data.memory}"}, "limits": {"memory": "1Gi"}}`)),
		},
		"a limit known at run time (the placeholder would be under the request)": {
			spec: podSpec("", container("dump", "busybox", `"resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "${object.data.memory}"}}`)),
		},
		"a missing image beside values known at run time": {
			spec: podSpec(`"restartPolicy": "${object.data.policy}"`, `{"name": "${object.metadata.name}"}`),
			want: []string{pod + ".containers[0].image: Required value"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, errs := New(nil, nil, nil, nil, Options{}).Compile(compileCtx(t, false), jobStep(v1alpha1.JobStep{}, tc.spec), stepPath)
			if len(errs) != len(tc.want) {
				t.Fatalf("Compile gave %d errors, want %d:\n%v", len(errs), len(tc.want), errs)
			}
			for i, want := range tc.want {
				if got := errs[i].Error(); got != want {
					t.Errorf("error %d:\n got %s\nwant %s", i, got, want)
				}
			}
		})
	}
}
