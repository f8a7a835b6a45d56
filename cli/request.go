package cli

import (
	"context"
	"strings"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// requestValue is the value of a request annotation (delete-requested, abandon, retry) for reason:
// "<user>: <reason>", <user> being the caller as the API server authenticates them (a
// SelfSubjectReview). The admission policy that checks requests admits no other value, and the
// operator records the user as who asked.
func (k *kube) requestValue(ctx context.Context, reason string) (string, error) {
	me, err := k.whoAmI(ctx)
	if err != nil {
		return "", err
	}
	reason = strings.TrimSpace(reason)
	if reason == me.Username || strings.HasPrefix(reason, me.Username+": ") {
		return reason, nil // named already
	}
	return me.Username + ": " + reason, nil
}

// requestsDoc says, for a command's help, how a request names who asks.
const requestsDoc = `The annotation's value is "<your user name>: <reason>": the admission policy ` + v1alpha1.RequestsPolicyName + `
admits no other, so the name recorded is the one the API server authenticated.`
