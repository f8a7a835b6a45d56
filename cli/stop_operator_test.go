package cli

import (
	"errors"
	"strings"
	"testing"
)

func TestParseOperatorRef(t *testing.T) {
	got, err := parseOperatorRef("teardown-system/teardown-operator")
	if err != nil || got != (operatorRef{Namespace: "teardown-system", Name: "teardown-operator"}) {
		t.Fatalf("parseOperatorRef = %+v, %v", got, err)
	}
	for _, bad := range []string{"", "teardown-operator", "/teardown-operator", "teardown-system/", "a/b/c",
		"deployment/teardown-system/teardown-operator", "Teardown-System/op", "ns/Op", "ns/op name"} {
		_, err := parseOperatorRef(bad)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), "--stop-operator") ||
			!strings.Contains(err.Error(), "NAMESPACE/NAME") {
			t.Errorf("parseOperatorRef(%q) = %v, want a usage error naming --stop-operator and NAMESPACE/NAME", bad, err)
		}
	}
}
