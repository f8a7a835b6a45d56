// Package resource implements the resource step: one Kubernetes object created, applied, patched
// or deleted through the API server, as a ServiceAccount the policy names, and, optionally, a
// wait until the object meets a condition.
//
// Every API call of a step, its reads included, is made as the step's ServiceAccount through
// impersonation, so what a policy may do is what the ServiceAccount's RBAC grants: the operator
// itself needs only the impersonate verb on serviceaccounts. A TeardownPolicy names a
// ServiceAccount of its own namespace and acts only there; a ClusterTeardownPolicy may name any
// ServiceAccount, or none, acting then with the operator's own rights.
//
// Each pass makes one action or one read, never waiting in place. The action is repeated safely
// after a crash or on a retry: a Create meets its object (AlreadyExists) and adopts it when its
// labels name this deletion and step (another object of that name is an error that says so);
// an Apply or a Patch is sent again; a Delete of an object already gone succeeds. Once the
// action is done, the object's UID is recorded and the conditions are checked against that
// object only, whenever the engine sees the kind change in its namespace and on an interval.
package resource
