package jobstep

import (
	"fmt"
	"maps"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The API server's checks of a Job that a template most often fails, made when the step is
// compiled (by the operator when the policy is applied, and by lint and test offline), worded as
// the API server words them, at the template's own field paths. Without them such a template
// compiles, the policy is Ready, and the API server refuses the Job only at a deletion, which
// keeps the object. The operator also asks the API server itself (a dry-run create, ServerCheck)
// for what is not checked here.

// jobRestartPolicies are the pod restart policies a Job accepts.
var jobRestartPolicies = []string{string(corev1.RestartPolicyOnFailure), string(corev1.RestartPolicyNever)}

var pullPolicies = []string{string(corev1.PullAlways), string(corev1.PullIfNotPresent), string(corev1.PullNever)}

var portProtocols = []string{string(corev1.ProtocolSCTP), string(corev1.ProtocolTCP), string(corev1.ProtocolUDP)}

// validateJobSpec checks spec, decoded from the template with every ${...} replaced by a
// placeholder, as the API server checks a Job's spec. path is the template's spec; rendered
// reports whether a value (or one under it) holds a ${...}, known only at run time, whose checks
// are skipped.
func validateJobSpec(spec *batchv1.JobSpec, path *field.Path, rendered func(string) bool) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct {
		name  string
		value *int32
	}{{"parallelism", spec.Parallelism}, {"completions", spec.Completions}, {"backoffLimit", spec.BackoffLimit}} {
		if f.value != nil && *f.value < 0 {
			errs = append(errs, field.Invalid(path.Child(f.name), *f.value, "must be greater than or equal to 0"))
		}
	}
	if d := spec.ActiveDeadlineSeconds; d != nil && *d < 0 {
		errs = append(errs, field.Invalid(path.Child("activeDeadlineSeconds"), *d, "must be greater than or equal to 0"))
	}
	pod := path.Child("template", "spec")
	switch rp := spec.Template.Spec.RestartPolicy; rp {
	case "", corev1.RestartPolicyNever: // "" is Never: the step sets it
	case corev1.RestartPolicyOnFailure:
		if spec.PodFailurePolicy != nil {
			errs = append(errs, field.Invalid(pod.Child("restartPolicy"), rp, `only "Never" is supported when podFailurePolicy is specified`))
		}
	default:
		errs = append(errs, field.NotSupported(pod.Child("restartPolicy"), rp, jobRestartPolicies))
	}
	errs = append(errs, validatePodSpec(&spec.Template.Spec, pod, rendered)...)
	return slices.DeleteFunc(errs, func(e *field.Error) bool { return rendered(e.Field) })
}

// validatePodSpec checks the pod template's spec: containers, volumes and their mounts.
func validatePodSpec(ps *corev1.PodSpec, path *field.Path, rendered func(string) bool) field.ErrorList {
	var errs field.ErrorList
	if len(ps.Containers) == 0 {
		errs = append(errs, field.Required(path.Child("containers"), "a Job needs at least one container"))
	}
	volumes, volErrs := validateVolumes(ps.Volumes, path.Child("volumes"))
	errs = append(errs, volErrs...)
	// A mount may name a volume whose name is rendered: nothing can be said of it before.
	volumesKnown := true
	for i := range ps.Volumes {
		if rendered(path.Child("volumes").Index(i).Child("name").String()) {
			volumesKnown = false
		}
	}
	names := map[string]bool{}
	check := func(list []corev1.Container, p *field.Path) {
		for i := range list {
			cp := p.Index(i)
			errs = append(errs, validateContainer(&list[i], cp, rendered)...)
			errs = append(errs, validateMounts(list[i].VolumeMounts, cp.Child("volumeMounts"), volumes, volumesKnown)...)
			if n := list[i].Name; n != "" && names[n] {
				errs = append(errs, field.Duplicate(cp.Child("name"), n))
			}
			names[list[i].Name] = true
		}
	}
	// Containers first: the API server reports a name an init container shares on the latter.
	check(ps.Containers, path.Child("containers"))
	check(ps.InitContainers, path.Child("initContainers"))
	if sa := ps.ServiceAccountName; sa != "" {
		for _, msg := range validation.IsDNS1123Subdomain(sa) {
			errs = append(errs, field.Invalid(path.Child("serviceAccountName"), sa, msg))
		}
	}
	return errs
}

// validateContainer checks one container: its name, image, pull policy, ports, environment and
// resources.
func validateContainer(c *corev1.Container, path *field.Path, rendered func(string) bool) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, dnsLabel(c.Name, path.Child("name"))...)
	if c.Image == "" {
		errs = append(errs, field.Required(path.Child("image"), ""))
	}
	if p := c.ImagePullPolicy; p != "" && !slices.Contains(pullPolicies, string(p)) {
		errs = append(errs, field.NotSupported(path.Child("imagePullPolicy"), p, pullPolicies))
	}
	for i, port := range c.Ports {
		pp := path.Child("ports").Index(i)
		if port.ContainerPort == 0 {
			errs = append(errs, field.Required(pp.Child("containerPort"), ""))
		}
		for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
			if port.ContainerPort != 0 {
				errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, msg))
			}
		}
		if port.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
				errs = append(errs, field.Invalid(pp.Child("hostPort"), port.HostPort, msg))
			}
		}
		if port.Name != "" {
			for _, msg := range validation.IsValidPortName(port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
			}
		}
		if pr := port.Protocol; pr != "" && !slices.Contains(portProtocols, string(pr)) {
			errs = append(errs, field.NotSupported(pp.Child("protocol"), pr, portProtocols))
		}
	}
	for i, e := range c.Env {
		np := path.Child("env").Index(i).Child("name")
		if e.Name == "" {
			errs = append(errs, field.Required(np, ""))
			continue
		}
		for _, msg := range validation.IsRelaxedEnvVarName(e.Name) {
			errs = append(errs, field.Invalid(np, e.Name, msg))
		}
	}
	return append(errs, validateResources(c.Resources, path.Child("resources"), rendered)...)
}

// validateResources checks that no request is over its limit.
func validateResources(r corev1.ResourceRequirements, path *field.Path, rendered func(string) bool) field.ErrorList {
	var errs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(r.Requests)) {
		limit, ok := r.Limits[name]
		// The template's paths name map keys as fields (limits.memory).
		if !ok || rendered(path.Child("limits", string(name)).String()) || rendered(path.Child("requests", string(name)).String()) {
			continue
		}
		if req := r.Requests[name]; req.Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(path.Child("requests"), req.String(), fmt.Sprintf("must be less than or equal to %s limit of %s", name, limit.String())))
		}
	}
	return errs
}

// validateVolumes checks volume names, and returns them.
func validateVolumes(vols []corev1.Volume, path *field.Path) (map[string]bool, field.ErrorList) {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, v := range vols {
		np := path.Index(i).Child("name")
		errs = append(errs, dnsLabel(v.Name, np)...)
		if v.Name != "" && names[v.Name] {
			errs = append(errs, field.Duplicate(np, v.Name))
		}
		names[v.Name] = true
	}
	return names, errs
}

// validateMounts checks that each mount names a volume of the pod (when their names are all
// known) and a path.
func validateMounts(mounts []corev1.VolumeMount, path *field.Path, volumes map[string]bool, volumesKnown bool) field.ErrorList {
	var errs field.ErrorList
	for i, m := range mounts {
		mp := path.Index(i)
		switch {
		case m.Name == "":
			errs = append(errs, field.Required(mp.Child("name"), ""))
		case volumesKnown && !volumes[m.Name]:
			errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(mp.Child("mountPath"), ""))
		}
	}
	return errs
}

// dnsLabel checks a name that must be a DNS-1123 label (containers, volumes).
func dnsLabel(name string, path *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}
