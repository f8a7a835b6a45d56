package expr

import (
	"slices"
	"testing"
)

func TestUnsafeReads(t *testing.T) {
	env, err := NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string][]string{
		// The docs' usual mistake, and its safe forms.
		"object.data.tier == 'prod'":                                              {"object.data"},
		"has(object.data) && object.data.tier == 'prod'":                          {"object.data.tier"},
		"has(object.data) && has(object.data.tier) && object.data.tier == 'prod'": nil,
		"has(object.data.tier) && object.data.tier == 'prod'":                     {"object.data"},
		"object.data.tier == 'prod' && has(object.data) && has(object.data.tier)": nil, // && is commutative in CEL
		"object.?data.?tier.orValue('') == 'prod'":                                nil,
		"object.?data.?tier.hasValue()":                                           nil,
		"object.?data.?tier.hasValue() && object.data.tier == 'prod'":             nil,
		"object.spec.?tier.orValue('') == 'large'":                                {"object.spec"},
		// Labels, annotations and other maps: keys.
		"object.metadata.labels['tier'] == 'prod'":                                                                 {"object.metadata.labels"},
		"has(object.metadata.labels) && object.metadata.labels['tier'] == 'prod'":                                  {"object.metadata.labels['tier']"},
		"'tier' in object.metadata.?labels.orValue({})":                                                            nil,
		"'tier' in object.metadata.labels":                                                                         {"object.metadata.labels"},
		"has(object.metadata.labels) && 'tier' in object.metadata.labels && object.metadata.labels['tier'] == 'x'": nil,
		"object.metadata.?labels[?'tier'].orValue('') == 'prod'":                                                   nil,
		"object.metadata.annotations['example.com/keep'] == 'true'":                                                {"object.metadata.annotations"},
		// || and conditions: the other side, negated; the condition's test.
		"!has(object.spec) || object.spec.replicas == 0":                                  {"object.spec.replicas"}, // spec is there, replicas may not be
		"!has(object.spec) || !has(object.spec.replicas) || object.spec.replicas == 0":    nil,
		"has(object.spec) ? object.spec.replicas > 0 : false":                             {"object.spec.replicas"},
		"has(object.spec.replicas) ? false : object.spec.paused":                          {"object.spec"}, // reported once
		"has(object.spec) && has(object.spec.replicas) ? object.spec.replicas > 0 : true": nil,
		// Always there.
		"object.metadata.name.startsWith('prod-') && object.metadata.namespace != 'kube-system'": nil,
		"object.kind == 'ConfigMap' && object.apiVersion == 'v1' && object.metadata.uid != ''":   nil,
		// Lists, comprehensions, dynamic keys, each read once.
		"object.metadata.ownerReferences.exists(r, r.kind == 'StatefulSet')":              {"object.metadata.ownerReferences"},
		"object.metadata.?ownerReferences.orValue([]).exists(r, r.kind == 'StatefulSet')": nil,
		"object.data[object.metadata.name] == 'x' || object.data.x == 'y'":                {"object.data"},
		"size(object.spec.items) > 0 && object.spec.items[0].name == 'a'":                 {"object.spec"},
		"object.spec.a == object.spec.b":                                                  {"object.spec"},
		"object.status.phase == 'Bound' || object.spec.x == 1":                            {"object.status", "object.spec"},
		// Not object.
		"run.name != '' && steps.snapshot.phase == 'Succeeded'": nil,
	}
	for src, want := range tests {
		got, err := env.UnsafeReads(src, nil)
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("UnsafeReads(%s) = %q, want %q", src, got, want)
		}
	}
	if _, err := env.UnsafeReads("object.data.tier ==", nil); err == nil {
		t.Error("a syntax error: want an error")
	}
}

func TestUnsafeReadsOfAKindsFields(t *testing.T) {
	env, err := NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	secretType := func(names []string) bool { return slices.Equal(names, []string{"type"}) }
	got, err := env.UnsafeReads("object.type == 'Opaque' && object.data.x == 'y'", secretType)
	if err != nil || !slices.Equal(got, []string{"object.data"}) {
		t.Errorf("UnsafeReads = %q, %v; want object.data only", got, err)
	}
}
