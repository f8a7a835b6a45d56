// Package naming derives the stable names the operator writes into the cluster: finalizers, run
// names and label values. A name, once shipped, must never change for the same input, so every
// function here is pure and covered by table tests.
package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Domain is the suffix of every finalizer, label and annotation the operator owns.
const Domain = "teardown.dev"

// MaxLabel is the longest DNS label, label value or qualified-name part Kubernetes accepts.
const MaxLabel = 63

// hashLen is how many hex digits of SHA-256 a shortened name keeps: 40 bits, so a collision
// between two names sharing the same 52-character prefix is not a practical concern.
const hashLen = 10

// Shorten returns s unchanged when it fits in max characters; otherwise a prefix of s, a dash and
// a short hash of all of s, max characters at most. The prefix loses trailing '-' and '.' so the
// result stays a valid DNS label or subdomain.
func Shorten(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return strings.TrimRight(s[:max-hashLen-1], "-.") + "-" + Hash(s)
}

// Hash returns a short, stable hex digest of the parts, joined unambiguously.
func Hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:hashLen]
}

// Finalizer returns the finalizer a policy puts on its targets, for example
// "teardownpolicy.teardown.dev/db-snapshot". Policy names longer than 63 characters are shortened
// with a hash so the result is a valid qualified name.
func Finalizer(policyKind, policyName string) string {
	return strings.ToLower(policyKind) + "." + Domain + "/" + Shorten(policyName, MaxLabel)
}

// IsOurs reports whether a finalizer belongs to some teardown policy.
func IsOurs(finalizer string) bool {
	prefix, _, ok := strings.Cut(finalizer, "/")
	return ok && (prefix == "teardownpolicy."+Domain || prefix == "clusterteardownpolicy."+Domain)
}

// RunName returns the name of the run for one deletion of one target by one policy: the target's
// name (shortened) and a hash of the policy and the target's UID. The same deletion always gets
// the same name, so a repeated create finds the run it already made.
func RunName(policyKind, policyNamespace, policyName, targetName string, targetUID types.UID) string {
	h := Hash(policyKind, policyNamespace, policyName, string(targetUID))
	// Some kinds allow names that are not DNS names (RBAC objects: "system:node"); the hash keeps
	// the result unique whatever the replaced characters were.
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, strings.ToLower(targetName))
	base := strings.Trim(Shorten(clean, MaxLabel-hashLen-1), "-.")
	if base == "" {
		return "run-" + h
	}
	return base + "-" + h
}

// DeletionID names one deletion of one target by one policy: the target's UID and a hash of the
// policy. It exists before any TeardownRun does (a run may never be recorded), so it is what
// side effects are keyed on, such as an http step's Idempotency-Key.
func DeletionID(policyKind, policyNamespace, policyName string, targetUID types.UID) string {
	return string(targetUID) + "-" + Hash(policyKind, policyNamespace, policyName)
}

// LabelValue makes s usable as a label value: unchanged when it fits, else shortened with a hash.
func LabelValue(s string) string {
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '-'
	}, s)
	if clean != s && len(clean) <= MaxLabel-hashLen-1 {
		clean += "-" + Hash(s) // keep distinct originals distinct
	}
	return strings.Trim(Shorten(clean, MaxLabel), "-_.")
}

// JobName returns the name of the Job a job step creates for one attempt: the run's name, the
// step and the attempt, shortened with a hash when longer than 63 characters (a Job's name is
// also the value of its pods' job-name label). The same attempt always gets the same name, so a
// create repeated after a crash finds the Job it already made.
func JobName(runName, step string, attempt int32) string {
	s := strings.ReplaceAll(fmt.Sprintf("%s-%s-%d", runName, step, attempt), ".", "-")
	return Shorten(s, MaxLabel)
}

// ArmingPolicyName returns the name of the MutatingAdmissionPolicy (and of its binding) that
// arms a policy's targets at creation: "teardown.dev-arm-tdp-<namespace>.<name>" for a
// TeardownPolicy, "teardown.dev-arm-ctdp-<name>" for a ClusterTeardownPolicy (the short names of
// the kinds), shortened with a hash past 253 characters.
func ArmingPolicyName(policyNamespace, policyName string) string {
	if policyNamespace == "" {
		return Shorten(Domain+"-arm-ctdp-"+policyName, maxSubdomain)
	}
	return Shorten(Domain+"-arm-tdp-"+policyNamespace+"."+policyName, maxSubdomain)
}

// maxSubdomain is the longest DNS subdomain, the limit of most object names.
const maxSubdomain = 253

// ApprovalName returns the name of the TeardownApproval in which user answers an attempt of an
// approval step of a run: "<step>-<attempt>-<hash>", the hash of the run's UID, the step, the
// attempt and the user. One person has one answer per attempt: a second is refused as existing.
func ApprovalName(runUID types.UID, step string, attempt int32, user string) string {
	return fmt.Sprintf("%s-%d-%s", step, attempt, Hash(string(runUID), step, fmt.Sprint(attempt), user))
}
