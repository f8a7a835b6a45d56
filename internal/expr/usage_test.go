package expr

import "testing"

func TestUsageRecordsTheVariablesRead(t *testing.T) {
	tests := []struct {
		name, src string
		template  bool
		object    bool
	}{
		{"object field", "object.metadata.name == 'db'", false, true},
		{"index form", "object['spec']['size'] > 1", false, true},
		{"has()", "has(object.spec)", false, true},
		{"inside a comprehension", "[1, 2].all(i, object.metadata.name != string(i))", false, true},
		{"steps only", "steps.export.phase == 'Succeeded'", false, false},
		{"run only", "run.attempt < 3", false, false},
		{"constant", "true", false, false},
		{"a comprehension's own variable named like another", "[1].exists(x, x == 1)", false, false},
		{"template reading object", "https://db/${object.metadata.name}", true, true},
		{"template reading run", "key-${run.uid}", true, false},
		{"literal template", "https://example.com/hook", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &Usage{}
			env := newEnv(t).Tracking(u)
			var err error
			if tt.template {
				_, err = env.CompileTemplate(tt.src)
			} else {
				_, err = env.CompileCondition(tt.src)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := u.Reads(VarObject); got != tt.object {
				t.Errorf("Reads(object) = %v, want %v", got, tt.object)
			}
		})
	}
}

func TestUsageFollowsDerivedEnvironments(t *testing.T) {
	u := &Usage{}
	env, err := newEnv(t).Tracking(u).Declare(Var{Name: "response", Type: Dyn})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Reserve("job").WithSteps(StepScope{}).CompileCondition("response.status == 200 && object.kind == 'X'"); err != nil {
		t.Fatal(err)
	}
	if !u.Reads(VarObject) || !u.Reads("response") {
		t.Error("an environment derived from a tracking one records in the same Usage")
	}
}

func TestUsageTellsMetadataFromTheRest(t *testing.T) {
	tests := []struct {
		src    string
		beyond bool
	}{
		{"object.metadata.name == 'db'", false},
		{"has(object.metadata.labels) && object.metadata.labels['tier'] == 'prod'", false},
		{"object.metadata.uid != '' && object.metadata.namespace != ''", false},
		{"object.metadata.annotations['x'] == 'y'", true},
		{"object.metadata.managedFields.size() > 0", true},
		{"has(object.metadata)", true},
		{"object.spec.size > 1", true},
		{"object['metadata']['name'] == 'db'", true},
		{"object.metadata.name == 'db' && object.data.k == 'v'", true},
		{"[1].all(object, object > 0)", true},
		{"run.attempt < 3", false},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			u := &Usage{}
			if _, err := newEnv(t).Tracking(u).CompileCondition(tt.src); err != nil {
				t.Fatal(err)
			}
			if got := u.ReadsBeyondMetadata(VarObject); got != tt.beyond {
				t.Errorf("ReadsBeyondMetadata(object) = %v, want %v", got, tt.beyond)
			}
		})
	}
}
